"""Following an upstream's list pages (`upstream.listing.list_all`): hostile pages are bounded,
items without the field that names them are dropped, and tools whose inputSchema has an invalid
`x-mcp-header` annotation are excluded (SEP-2243)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tfunnel.upstream import listing
from tfunnel.upstream.listing import PROMPTS, RESOURCES, TEMPLATES, TOOLS, Kind, changed_kinds, declared


class Pages:
    """An upstream answering list requests from `pages` (by cursor; "" is the first page)."""

    def __init__(self, pages: dict[str, dict[str, Any]] | None = None, *, endless: bool = False) -> None:
        self.pages = pages or {}
        self.endless = endless
        self.asked: list[dict[str, Any]] = []

    async def request(self, method: str, params: dict[str, Any], *, timeout_s: float) -> dict[str, Any]:
        self.asked.append(params)
        if self.endless:
            return {"resources": [{"uri": f"u{len(self.asked)}"}], "nextCursor": f"c{len(self.asked)}"}
        return self.pages[params.get("cursor", "")]


def run(kind: Kind, upstream: Pages) -> tuple[dict[str, Any], ...]:
    async def main() -> tuple[dict[str, Any], ...]:
        return await listing.list_all(upstream, kind, 1.0)
    return trio.run(main)


def test_pages_are_followed_and_nameless_items_dropped() -> None:
    upstream = Pages({"": {"prompts": [{"name": "a"}, {"name": ""}, {"title": "no name"}, "x", {"name": 3}],
                           "nextCursor": "n"},
                      "n": {"prompts": [{"name": "b"}], "nextCursor": ""}})
    assert [p["name"] for p in run(PROMPTS, upstream)] == ["a", "b"]
    assert upstream.asked == [{}, {"cursor": "n"}]


@pytest.mark.parametrize("page", [{"resources": "nope"}, {"resources": None, "nextCursor": 5}, {}])
def test_a_malformed_page_lists_nothing_and_ends(page: dict[str, Any]) -> None:
    assert run(RESOURCES, Pages({"": page})) == ()


def test_an_upstream_that_pages_forever_is_asked_a_bounded_number_of_times() -> None:
    upstream = Pages(endless=True)
    assert len(run(RESOURCES, upstream)) == listing.MAX_PAGES
    assert len(upstream.asked) == listing.MAX_PAGES


def test_a_huge_list_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listing, "MAX_ITEMS", 3)
    templates = [{"uriTemplate": f"t{i}"} for i in range(5)]
    upstream = Pages({"": {"resourceTemplates": templates, "nextCursor": "n"}})
    assert [t["uriTemplate"] for t in run(TEMPLATES, upstream)] == ["t0", "t1", "t2"]
    assert len(upstream.asked) == 1  # the cap ends the paging too


@pytest.mark.parametrize(("kind", "capabilities", "expected"), [
    (TOOLS, {}, True), (PROMPTS, {}, False), (PROMPTS, {"prompts": {}}, True),
    (PROMPTS, {"prompts": True}, False), (RESOURCES, {"resources": {"subscribe": True}}, True),
    (TEMPLATES, {"resources": {}}, True), (TEMPLATES, {"prompts": {}}, False)])
def test_which_kinds_an_upstream_declares(kind: Kind, capabilities: dict[str, Any], expected: bool) -> None:
    assert declared(kind, capabilities) is expected


def test_a_list_changed_names_its_kinds() -> None:
    assert changed_kinds("notifications/tools/list_changed") == (TOOLS,)
    assert changed_kinds("notifications/resources/list_changed") == (RESOURCES, TEMPLATES)
    assert changed_kinds("notifications/message") == ()


def schema(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def test_a_tool_with_an_invalid_header_annotation_is_excluded() -> None:
    """Invalid annotations (a number, an empty name, a duplicate) drop the tool, on every page;
    valid, absent or unannotated schemas keep theirs. Other kinds are not looked at."""
    good = {"name": "good", "inputSchema": schema(region={"type": "string", "x-mcp-header": "Region"})}
    plain = {"name": "plain", "inputSchema": schema(q={"type": "string"})}
    bare = {"name": "bare"}
    number = {"name": "number", "inputSchema": schema(n={"type": "number", "x-mcp-header": "N"})}
    empty = {"name": "empty", "inputSchema": schema(v={"type": "string", "x-mcp-header": ""})}
    twice = {"name": "twice", "inputSchema": schema(a={"type": "string", "x-mcp-header": "X"},
                                                    b={"type": "string", "x-mcp-header": "x"})}
    upstream = Pages({"": {"tools": [good, number, plain], "nextCursor": "2"},
                      "2": {"tools": [empty, bare, twice]}})
    assert run(TOOLS, upstream) == (good, plain, bare)
    assert upstream.asked == [{}, {"cursor": "2"}]
    odd_prompt = {"name": "p", "inputSchema": number["inputSchema"]}
    assert run(PROMPTS, Pages({"": {"prompts": [odd_prompt]}})) == (odd_prompt,)
