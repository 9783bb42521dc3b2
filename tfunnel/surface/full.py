"""The full surface: what `tools/list` would be with every enabled tool on the top level (pure).

Token telemetry compares it with the lean list (`Catalog.top_level`): every enabled register
tool (as a promoted one is listed) and every enabled upstream tool (as a curated or promoted one
is listed), with its schema; no meta-tools, which exist to reach the tools the lean list leaves
out. Under a wrap the surface already is every enabled tool: the two are the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfunnel.surface.catalog import Catalog, local_input_schema


def full_top_level(catalog: Catalog, meta_definitions: Mapping[str, Mapping[str, Any]]
                   ) -> list[dict[str, Any]]:
    """Every enabled tool's top-level definition: register tools (register order), then upstream
    tools (config order)."""
    if catalog.wrap is not None:
        return catalog.top_level(meta_definitions)
    tools = [{"name": entry.id, "title": entry.name, "description": entry.summary or entry.name,
              "inputSchema": local_input_schema(entry)}
             for entry in catalog.register.tools if catalog.visibility(entry.id, "local").enabled]
    tools += [tool.top_level_definition() for tool in catalog.upstream
              if catalog.visibility(tool.surfaced, "upstream").enabled]
    return tools
