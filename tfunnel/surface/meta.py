"""The four meta-tools: exact definitions and what each one does.

Handlers raise `ToolFailure` for anything the caller got wrong; `Surface.call` is the one place
that turns it into an `isError` result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from tfunnel.surface.examples import example_args, examples_section

HOWTO_TOPICS = ("create-tool", "add-mcp", "add-hook", "package", "wrap", "configure", "prompts-resources",
                "manage")
# What toolfunnel_list_tools lists (`kind`): tools by default.
LIST_KINDS = ("tools", "prompts", "resources")

LIST_TOOLS = "toolfunnel_list_tools"
TOOL_INSTRUCTIONS = "toolfunnel_tool_instructions"
RUN_TOOL = "toolfunnel_run_tool"
HOWTO = "toolfunnel_howto"

DEFINITIONS: Mapping[str, Mapping[str, Any]] = {
    LIST_TOOLS: {
        "name": LIST_TOOLS,
        "title": "List tools",
        "description": (
            "List the tools this gateway can run (briefs: id, name, summary, category). "
            "Narrow with `filter` (substring), `category` (exact) or rank with `query` "
            "(relevance search over names, summaries, instructions and parameters). "
            "Then read a tool's instructions with toolfunnel_tool_instructions and run it "
            "with toolfunnel_run_tool. "
            "The upstream MCP servers' prompts and resources are listed with `kind`: "
            "\"prompts\" (name, title, summary, upstream, arguments) or \"resources\" "
            "(resources by uri, then resource templates by uriTemplate). Read those with the "
            "MCP methods prompts/get and resources/read, not with a tool."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "kind": {"type": "string", "enum": list(LIST_KINDS),
                         "description": "What to list: tools (the default), prompts or resources."},
                "filter": {"type": "string",
                           "description": "Case-insensitive substring of id, name or summary."},
                "category": {"type": "string",
                             "description": "Exact category, e.g. `crypto` or `mcp:<upstream>`; "
                                            "tools only."},
                "query": {"type": "string", "description": "Free-text search; results best first."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 500,
                          "description": "At most this many results (default 20 with `query`)."},
            },
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
    },
    TOOL_INSTRUCTIONS: {
        "name": TOOL_INSTRUCTIONS,
        "title": "Tool instructions",
        "description": "Show how to use one tool: what it does, its arguments, and the exact "
                       "toolfunnel_run_tool call.",
        "inputSchema": {
            "type": "object",
            "properties": {"name": {"type": "string", "minLength": 1,
                                    "description": "The tool's id or name, as listed."}},
            "required": ["name"],
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
    },
    RUN_TOOL: {
        "name": RUN_TOOL,
        "title": "Run a tool",
        "description": "Run one tool by id or name with its arguments. Every call passes the "
                       "gateway's policy hooks.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1, "description": "The tool's id or name."},
                "args": {"type": "object", "description": "The tool's arguments (see its instructions)."},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
    },
    HOWTO: {
        "name": HOWTO,
        "title": "How to extend this gateway",
        "description": "Guides for extending this gateway: create-tool, add-mcp, add-hook, "
                       "package, wrap, configure; prompts-resources: the upstreams' prompts "
                       "and resources, how to read and hide them; manage: changing this gateway "
                       "in-band with the tf_* tools, and which changes the user must confirm.",
        "inputSchema": {
            "type": "object",
            "properties": {"topic": {"type": "string", "enum": list(HOWTO_TOPICS)}},
            "required": ["topic"],
            "additionalProperties": False,
        },
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
    },
}


def howto_text(topic: str) -> str:
    """The markdown guide for `topic` (one of `HOWTO_TOPICS`; the caller validated it)."""
    return resources.files("tfunnel.surface").joinpath("howto", f"{topic}.md").read_text("utf-8")


def synthesized_instructions(tool_id: str, display: str, summary: str,
                             schema: Mapping[str, Any] | None,
                             examples: Sequence[Mapping[str, Any]] = ()) -> str:
    """Instructions for a tool whose register entry has none: summary, schema, example call (its
    first register `examples` entry, else one built from the schema), its other examples."""
    required = list(schema.get("required", [])) if schema else []
    args = dict(examples[0]) if examples else example_args(schema)
    lines = [f"# {display} (`{tool_id}`)", "", summary or "(no summary)", "",
             "Run it with:", "```json",
             json.dumps({"name": tool_id, "args": args}, ensure_ascii=False), "```",
             *examples_section(tool_id, examples[1:], "More examples:")]
    if schema:
        lines += ["", "Input schema:", "```json", json.dumps(schema, indent=2, ensure_ascii=False), "```"]
    if required:
        lines += ["", "Required: " + ", ".join(required)]
    return "\n".join(lines)
