"""toolfunnel_list_tools `kind`: the upstreams' prompts and resources as briefs, narrowed like
tools, visible ones only."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tfunnel.config.model import Register, ToolEntry, ToolState, Visibility
from tfunnel.surface import meta
from tfunnel.surface.catalog import Catalog
from tfunnel.surface.service import _listing
from tfunnel.surface.upstream_items import Extras
from tfunnel.surface.validation import validate_args

PROMPTS: dict[str, list[dict[str, Any]]] = {
    "docs": [{"name": "summarize", "title": "Summarize a page", "description": "Summarize one page.",
              "arguments": [{"name": "url", "required": True}, {"name": "style"}]},
             {"name": "plain", "description": "No arguments here."}],
    "git": [{"name": "commit-message", "description": "Write a commit message for staged changes."}],
}
RESOURCES: dict[str, list[dict[str, Any]]] = {
    "docs": [{"uri": "docs://index", "name": "index", "description": "Every page.",
              "mimeType": "text/markdown"},
             {"uri": "file:///shared", "name": "shared"}],
    "git": [{"uri": "file:///shared", "name": "shared", "description": "The git one."}],
}
TEMPLATES: dict[str, list[dict[str, Any]]] = {"docs": [{"uriTemplate": "docs://page/{slug}", "name": "page",
                       "description": "One page by slug.", "mimeType": "text/markdown"}]}


def catalog(**state: Visibility) -> Catalog:
    register = Register(tools=(ToolEntry("hash", "Hash", "Digests.", "crypto"),))
    extras = Extras.assemble(PROMPTS, RESOURCES, TEMPLATES, ["docs", "git"])
    return Catalog(register, ToolState(entries=state), extras=extras)


def test_prompt_brief_shape() -> None:
    assert catalog().prompt_briefs(filter="summ") == [
        {"name": "docs_summarize", "title": "Summarize a page", "summary": "Summarize one page.",
         "upstream": "docs", "arguments": ["url", "style"]}]
    assert catalog().prompt_briefs(filter="plain") == [
        {"name": "docs_plain", "title": "plain", "summary": "No arguments here.", "upstream": "docs",
         "arguments": []}]


def test_resource_brief_shape() -> None:
    """Resources by uri (mimeType when listed), templates by uriTemplate; shared URIs qualified."""
    resources, templates = catalog().resource_briefs()
    assert resources == [
        {"uri": "docs://index", "name": "index", "summary": "Every page.", "mimeType": "text/markdown",
         "upstream": "docs"},
        {"uri": "tfunnel+docs:file:///shared", "name": "shared", "summary": "", "upstream": "docs"},
        {"uri": "tfunnel+git:file:///shared", "name": "shared", "summary": "The git one.",
         "upstream": "git"}]
    assert templates == [{"uriTemplate": "docs://page/{slug}", "name": "page",
                          "summary": "One page by slug.", "mimeType": "text/markdown", "upstream": "docs"}]


@pytest.mark.parametrize(("state", "kwargs", "names"), [
    pytest.param({}, {}, ["docs_summarize", "docs_plain", "git_commit-message"], id="all-config-order"),
    pytest.param({"prompt:docs_plain": Visibility(enabled=False)}, {},
                 ["docs_summarize", "git_commit-message"], id="disabled-left-out"),
    pytest.param({"prompt:docs_plain": Visibility(hidden=True, hot=True)}, {},
                 ["docs_summarize", "docs_plain", "git_commit-message"], id="only-enabled-counts"),
    pytest.param({}, {"filter": "GIT"}, ["git_commit-message"], id="filter-case-insensitive"),
    pytest.param({}, {"filter": "arguments"}, ["docs_plain"], id="filter-summary"),
    pytest.param({}, {"limit": 2}, ["docs_summarize", "docs_plain"], id="limit"),
    pytest.param({}, {"query": "commit staged"}, ["git_commit-message"], id="query"),
    pytest.param({}, {"query": "page url"}, ["docs_summarize"], id="query-argument-names"),
    pytest.param({}, {"query": "nothing-like-it"}, [], id="query-no-hit"),
])
def test_prompt_briefs(state: dict[str, Visibility], kwargs: dict[str, Any], names: list[str]) -> None:
    assert [b["name"] for b in catalog(**state).prompt_briefs(**kwargs)] == names


@pytest.mark.parametrize(("state", "kwargs", "uris", "templates"), [
    pytest.param({}, {}, ["docs://index", "tfunnel+docs:file:///shared", "tfunnel+git:file:///shared"],
                 ["docs://page/{slug}"], id="all"),
    pytest.param({"resource:docs://index": Visibility(enabled=False),
                  "resource:docs://page/{slug}": Visibility(enabled=False)}, {},
                 ["tfunnel+docs:file:///shared", "tfunnel+git:file:///shared"], [], id="disabled-left-out"),
    pytest.param({}, {"filter": "page"}, ["docs://index"], ["docs://page/{slug}"], id="filter-both"),
    pytest.param({}, {"limit": 3}, ["docs://index", "tfunnel+docs:file:///shared",
                                    "tfunnel+git:file:///shared"], [], id="limit-counts-both"),
    pytest.param({}, {"query": "slug"}, [], ["docs://page/{slug}"], id="query-template"),
    pytest.param({}, {"query": "git"}, ["tfunnel+git:file:///shared"], [], id="query-qualified"),
])
def test_resource_briefs(state: dict[str, Visibility], kwargs: dict[str, Any], uris: list[str],
                         templates: list[str]) -> None:
    resources, listed_templates = catalog(**state).resource_briefs(**kwargs)
    assert [r["uri"] for r in resources] == uris
    assert [t["uriTemplate"] for t in listed_templates] == templates


@pytest.mark.parametrize(("args", "key", "count"), [
    pytest.param({}, "tools", 1, id="default-tools"),
    pytest.param({"kind": "tools", "category": "crypto"}, "tools", 1, id="tools-category"),
    pytest.param({"kind": "prompts"}, "prompts", 3, id="prompts"),
    pytest.param({"kind": "prompts", "category": "crypto"}, "prompts", 3, id="category-is-for-tools"),
    pytest.param({"kind": "resources"}, "resources", 3, id="resources"),
])
def test_listing_shapes(args: dict[str, Any], key: str, count: int) -> None:
    """Structured content under the kind's key (resources with resourceTemplates beside them);
    the text is the same JSON (the list, or for resources the object)."""
    validate_args(meta.LIST_TOOLS, meta.DEFINITIONS[meta.LIST_TOOLS]["inputSchema"], args)
    result = _listing(catalog(), args)
    assert result.structured is not None
    assert len(result.structured[key]) == count
    text = json.loads(result.content[0]["text"])
    if key == "resources":
        assert text == result.structured and len(text["resourceTemplates"]) == 1
    else:
        assert result.structured == {key: text}


def test_unknown_kind_is_refused() -> None:
    from tfunnel.errors import ToolFailure

    with pytest.raises(ToolFailure):
        validate_args(meta.LIST_TOOLS, meta.DEFINITIONS[meta.LIST_TOOLS]["inputSchema"], {"kind": "hooks"})


def test_description_tells_of_prompts_and_resources() -> None:
    """The model learns that prompts and resources exist and how they are read."""
    definition = meta.DEFINITIONS[meta.LIST_TOOLS]
    assert "prompts/get" in definition["description"] and "resources/read" in definition["description"]
    assert "tools only" in definition["inputSchema"]["properties"]["category"]["description"]
