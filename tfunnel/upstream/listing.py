"""What an upstream lists, kind by kind: tools, prompts, resources, resource templates.

One table (`KINDS`) says, for each kind, the list method, the result key, the capability that
declares it, the notification that says it changed, and the field that identifies an item; one
function (`list_all`) follows the pages. An item without its identifying string is dropped (the
surface names items by it; so is one whose identifier is not valid Unicode, which no client could
be sent and no approval could name), and so is a tool whose inputSchema has an invalid `x-mcp-header`
annotation (SEP-2243: a client MUST exclude it, since no request to it could mirror its headers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from tfunnel.protocol.headers import param_headers

log = structlog.get_logger("tfunnel.upstream")

# Pages followed before we stop trusting nextCursor, and items kept per kind: an upstream that
# pages forever, or lists a million resources, costs a bounded listing.
MAX_PAGES = 50
MAX_ITEMS = 10_000


@dataclass(frozen=True)
class Kind:
    name: str  # tools | prompts | resources | templates
    method: str
    key: str
    capability: str
    changed: str  # the upstream's notification that the list changed
    ident: str  # the field naming an item


TOOLS = Kind("tools", "tools/list", "tools", "tools", "notifications/tools/list_changed", "name")
PROMPTS = Kind("prompts", "prompts/list", "prompts", "prompts", "notifications/prompts/list_changed", "name")
RESOURCES = Kind("resources", "resources/list", "resources", "resources",
                 "notifications/resources/list_changed", "uri")
TEMPLATES = Kind("templates", "resources/templates/list", "resourceTemplates", "resources",
                 "notifications/resources/list_changed", "uriTemplate")
KINDS = (TOOLS, PROMPTS, RESOURCES, TEMPLATES)
# The kinds other than tools, which an upstream lists only when it declares their capability.
EXTRAS = (PROMPTS, RESOURCES, TEMPLATES)

Items = tuple[dict[str, Any], ...]


class Requester(Protocol):
    async def request(self, method: str, params: dict[str, Any], *, timeout_s: float) -> dict[str, Any]: ...


def declared(kind: Kind, capabilities: Mapping[str, Any]) -> bool:
    """Whether `capabilities` (the upstream's) declare `kind` (tools are always asked for)."""
    return kind is TOOLS or isinstance(capabilities.get(kind.capability), Mapping)


def changed_kinds(method: str) -> tuple[Kind, ...]:
    """The kinds an upstream's `notifications/*/list_changed` invalidates."""
    return tuple(kind for kind in KINDS if kind.changed == method)


async def list_all(session: Requester, kind: Kind, timeout_s: float) -> Items:
    """Every item of `kind`, following `nextCursor` (bounded); raises the session's `UpstreamError`."""
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        params = {"cursor": cursor} if cursor else {}
        page = await session.request(kind.method, params, timeout_s=timeout_s)
        found = page.get(kind.key)
        if isinstance(found, list):
            items += [item for item in found
                      if isinstance(item, dict) and _identifier(item.get(kind.ident))]
        if kind is TOOLS:
            items = [item for item in items if _mirrorable(item)]
        cursor = page.get("nextCursor")
        if len(items) >= MAX_ITEMS or not isinstance(cursor, str) or not cursor:
            break
    return tuple(items[:MAX_ITEMS])


def _identifier(value: Any) -> bool:
    if not isinstance(value, str) or not value:
        return False
    try:
        value.encode("utf-8")  # a lone surrogate (a lenient decoder lets "\\ud800" through) fails
    except UnicodeEncodeError:
        return False
    return True


def _mirrorable(tool: dict[str, Any]) -> bool:
    schema = tool.get("inputSchema")
    if not isinstance(schema, Mapping) or param_headers(schema) is not None:
        return True
    log.warning("upstream tool dropped: invalid x-mcp-header annotation in its inputSchema",
                tool=tool["name"])
    return False
