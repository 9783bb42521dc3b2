"""Prompt names, resource URIs and where a read goes (`surface.upstream_items`, pure), their
visibility in the catalog, client pages (`surface.pages`) and which lists a change is about
(`surface.changes`)."""

from __future__ import annotations

from typing import Any

import pytest

from tfunnel.config.model import Register, ToolState, Visibility
from tfunnel.errors import ProtocolError
from tfunnel.surface import pages
from tfunnel.surface.catalog import Catalog
from tfunnel.surface.changes import Changes
from tfunnel.surface.upstream_items import Extras, Route, route, split_qualified


def res(uri: str, **extra: Any) -> dict[str, Any]:
    return {"uri": uri, "name": uri.rsplit("/", 1)[-1], **extra}


def tpl(template: str) -> dict[str, Any]:
    return {"uriTemplate": template, "name": template}


EXTRAS = Extras.assemble(
    prompts={"a": [{"name": "p"}, {"name": "q"}], "b": [{"name": "p"}], "a_x": []},
    resources={"a": [res("file:///shared"), res("file:///only-a")], "b": [res("file:///shared")]},
    templates={"a": [tpl("doc://{id}")], "b": [tpl("doc://{id}"), tpl("log://{+path}{?lines}")]},
    resource_upstreams=["a", "b"])


def test_prompts_are_named_like_tools_and_an_earlier_upstream_keeps_a_collision() -> None:
    extras = Extras.assemble({"a": [{"name": "b_p"}], "a_b": [{"name": "p"}], "x": [{"name": "p"}]},
                             {}, {}, [])
    # `a` + `b_p` and `a_b` + `p` both make `a_b_p`: the earlier upstream in config order keeps it.
    assert [(p.surfaced, p.upstream, p.name) for p in extras.prompts] == [("a_b_p", "a", "b_p"),
                                                                           ("x_p", "x", "p")]
    assert [p.surfaced for p in EXTRAS.prompts] == ["a_p", "a_q", "b_p"]
    assert EXTRAS.prompts[0].listed() == {"name": "a_p"}


def test_a_uri_two_upstreams_list_is_qualified_for_both_and_a_unique_one_is_kept() -> None:
    assert [(r.surfaced, r.upstream, r.original) for r in EXTRAS.resources] == [
        ("tfunnel+a:file:///shared", "a", "file:///shared"), ("file:///only-a", "a", "file:///only-a"),
        ("tfunnel+b:file:///shared", "b", "file:///shared")]
    assert [t.surfaced for t in EXTRAS.templates] == ["tfunnel+a:doc://{id}", "tfunnel+b:doc://{id}",
                                                      "log://{+path}{?lines}"]
    assert EXTRAS.resources[0].listed() == {"uri": "tfunnel+a:file:///shared", "name": "shared"}


# (uri, (upstream, original, the listed item's surfaced form or None) or an error fragment)
ROUTES: list[tuple[str, tuple[str, str, str | None] | str]] = [
    ("file:///only-a", ("a", "file:///only-a", "file:///only-a")),
    ("tfunnel+b:file:///shared", ("b", "file:///shared", "tfunnel+b:file:///shared")),
    ("TFUNNEL+B:file:///shared", ("b", "file:///shared", "tfunnel+b:file:///shared")),  # a scheme's case
    ("tfunnel+B:file:///shared", ("b", "file:///shared", "tfunnel+b:file:///shared")),
    ("file:///shared", "listed by several upstreams; read one of tfunnel+a:file:///shared, "
                       "tfunnel+b:file:///shared"),
    ("tfunnel+a:doc://7", ("a", "doc://7", "tfunnel+a:doc://{id}")),
    ("log://var/app.log?lines=5", ("b", "log://var/app.log?lines=5", "log://{+path}{?lines}")),
    ("log://x", ("b", "log://x", "log://{+path}{?lines}")),
    ("tfunnel+a:file:///never-listed", ("a", "file:///never-listed", None)),
    ("tfunnel+zz:file:///x", "no resource"),  # not an upstream that serves resources
    ("doc://7", "no resource"),  # the template is qualified: two upstreams have it
    ("other://x", "no resource"),  # two upstreams serve resources: no fallback
]


@pytest.mark.parametrize(("uri", "expected"), ROUTES)
def test_where_a_read_goes(uri: str, expected: tuple[str, str, str | None] | str) -> None:
    found = route(uri, EXTRAS)
    if isinstance(expected, str):
        assert isinstance(found, str) and expected in found
    else:
        assert isinstance(found, Route)
        assert (found.upstream, found.original, found.item.surfaced if found.item else None) == expected


def test_with_one_resource_upstream_an_unlisted_uri_goes_to_it() -> None:
    extras = Extras.assemble({}, {"a": [res("file:///x")]}, {}, ["a"])
    found = route("https://example.com/linked", extras)
    assert isinstance(found, Route) and (found.upstream, found.original) == ("a", "https://example.com/linked")
    assert found.gate_name == "resource:https://example.com/linked"


@pytest.mark.parametrize(("uri", "upstreams", "expected"), [
    ("tfunnel+a:x:y", ["a"], ("a", "x:y")), ("tfunnel+a-b.c:u", ["a-b.c"], ("a-b.c", "u")),
    ("tfunnel+a", ["a"], None), ("file:///x", ["a"], None), ("tfunnel+a:u", ["b"], None)])
def test_the_qualified_form_reads_back(uri: str, upstreams: list[str],
                                       expected: tuple[str, str] | None) -> None:
    assert split_qualified(uri, upstreams) == expected


def test_a_disabled_prompt_or_resource_is_neither_listed_nor_read() -> None:
    state = ToolState(entries={"prompt:a_p": Visibility(enabled=False),
                               "resource:file:///only-a": Visibility(enabled=False),
                               "resource:tfunnel+a:doc://{id}": Visibility(enabled=False)})
    catalog = Catalog(Register(), state, (), EXTRAS)
    assert [p.surfaced for p in catalog.prompts()] == ["a_q", "b_p"]
    assert catalog.prompt("a_p") == "prompt 'a_p' is disabled"
    assert catalog.prompt("nope") == "no prompt 'nope'"
    assert "file:///only-a" not in [r.surfaced for r in catalog.resources()]
    assert catalog.resource("file:///only-a") == "resource 'file:///only-a' is disabled"
    # A template's visibility holds for every URI read through it.
    assert catalog.resource("tfunnel+a:doc://9") == "resource 'tfunnel+a:doc://9' is disabled"
    assert isinstance(catalog.resource("tfunnel+b:doc://9"), Route)


@pytest.mark.parametrize(("count", "size", "pages_seen"), [(0, 3, [[]]), (3, 3, [[0, 1, 2]]),
                                                           (7, 3, [[0, 1, 2], [3, 4, 5], [6]])])
def test_pages_follow_their_cursors_to_the_end(count: int, size: int, pages_seen: list[list[int]]) -> None:
    items = list(range(count))
    seen: list[list[int]] = []
    cursor: str | None = None
    while True:
        shown, cursor = pages.page("prompts", items, cursor, size)
        seen.append(shown)
        if cursor is None:
            break
    assert seen == pages_seen


@pytest.mark.parametrize("cursor", ["", "forged", pages.cursor_for("resources", 3), 7, "x" * 100,
                                    pages.cursor_for("prompts", -1).replace("=", "")])
def test_a_cursor_not_ours_for_this_list_is_invalid_params(cursor: Any) -> None:
    with pytest.raises(ProtocolError) as caught:
        pages.page("prompts", [1, 2, 3], cursor, 2)
    assert caught.value.code == -32602


def test_a_change_says_which_lists_it_is_about() -> None:
    changes = Changes()
    start = changes.version
    changes.bump()
    changes.bump("prompts", "resources")
    assert changes.changed_since(start) == ("tools", "prompts", "resources")
    middle = changes.version
    changes.bump("resources")
    assert changes.changed_since(middle) == ("resources",)
    assert changes.changed_since(changes.version) == ()
