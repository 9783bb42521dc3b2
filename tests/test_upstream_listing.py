"""`upstream.listing.list_all`: pages followed, items without their identifier dropped, and tools
whose inputSchema has an invalid `x-mcp-header` annotation excluded (SEP-2243)."""

from __future__ import annotations

from typing import Any

from tfunnel.upstream.listing import PROMPTS, TOOLS, list_all


class Pages:
    """A requester answering each list request with the next page."""

    def __init__(self, *pages: dict[str, Any]) -> None:
        self.pages = list(pages)
        self.asked: list[tuple[str, dict[str, Any]]] = []

    async def request(self, method: str, params: dict[str, Any], *, timeout_s: float) -> dict[str, Any]:
        self.asked.append((method, params))
        return self.pages.pop(0)


def schema(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


async def test_a_tool_with_an_invalid_header_annotation_is_excluded() -> None:
    """Invalid annotations (a number, an empty name, a duplicate) drop the tool, on every page;
    valid, absent or unannotated schemas keep theirs. Other kinds are not looked at."""
    good = {"name": "good", "inputSchema": schema(region={"type": "string", "x-mcp-header": "Region"})}
    plain = {"name": "plain", "inputSchema": schema(q={"type": "string"})}
    bare = {"name": "bare"}
    number = {"name": "number", "inputSchema": schema(n={"type": "number", "x-mcp-header": "N"})}
    empty = {"name": "empty", "inputSchema": schema(v={"type": "string", "x-mcp-header": ""})}
    twice = {"name": "twice", "inputSchema": schema(a={"type": "string", "x-mcp-header": "X"},
                                                    b={"type": "string", "x-mcp-header": "x"})}
    session = Pages({"tools": [good, number, plain], "nextCursor": "2"}, {"tools": [empty, bare, twice]})
    assert await list_all(session, TOOLS, 1.0) == (good, plain, bare)
    assert session.asked == [("tools/list", {}), ("tools/list", {"cursor": "2"})]
    odd_prompt = {"name": "p", "inputSchema": number["inputSchema"]}
    assert await list_all(Pages({"prompts": [odd_prompt]}), PROMPTS, 1.0) == (odd_prompt,)
