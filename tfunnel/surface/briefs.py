"""What the listing meta-tools choose from and how they narrow it (pure): the brief of each
tool, prompt and resource, its search document (made once per item while it lives), and
`Listing`, the items of one listing with their search index, built once per catalog."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfunnel.config.model import ToolEntry
from tfunnel.surface import search
from tfunnel.surface.upstream_items import UpstreamPrompt, UpstreamResource
from tfunnel.surface.upstream_tools import UpstreamTool

DEFAULT_LIST_LIMIT = 20


@dataclass(frozen=True)
class Brief:
    """One listed item as `Listing.narrow` sees it; `category` is a prompt's or resource's upstream."""

    id: str
    name: str
    summary: str
    category: str
    text: search.Fields
    item: UpstreamPrompt | UpstreamResource | None = None


class Listing:
    """The items one kind of listing chooses from (a catalog's enabled tools, say), with the search
    index of all of them built at the first query and kept: a catalog is immutable, so each of
    its listings is built once per surface change, not per call."""

    def __init__(self, briefs: Iterable[Brief]) -> None:
        self.briefs = tuple(briefs)
        self._index: search.Index | None = None

    def narrow(self, filter: str, query: str, limit: int | None, category: str = "") -> list[Brief]:
        """`category` (exact) and `filter` (a substring of id, name or summary), then `query`
        (`search.Index`, best first, at most `limit` or `DEFAULT_LIST_LIMIT`) or, without one, the
        first `limit`. The whole listing's index is kept here; a narrowed one's by `search.index`
        (a bounded cache: what a client asks for never grows the catalog)."""
        if not filter and not category:
            if not query:
                return list(self.briefs[:limit] if limit is not None else self.briefs)
            if self._index is None:
                self._index = search.Index(tuple(b.text for b in self.briefs))
            return self._ranked(self.briefs, self._index, query, limit)
        needle = filter.lower()
        candidates = [b for b in self.briefs if (not category or b.category == category)
                      and needle in f"{b.id} {b.name} {b.summary}".lower()]
        if query:
            return self._ranked(candidates, search.index(tuple(b.text for b in candidates)), query, limit)
        return candidates[:limit] if limit is not None else candidates

    @staticmethod
    def _ranked(candidates: Sequence[Brief], index: search.Index, query: str,
                limit: int | None) -> list[Brief]:
        # By position: a resource and a template may share a surfaced string.
        return [candidates[position] for position in index.rank(query, limit or DEFAULT_LIST_LIMIT)]


def prompt_brief(prompt: UpstreamPrompt) -> dict[str, Any]:
    return {"name": prompt.surfaced, "title": prompt.title, "summary": prompt.description,
            "upstream": prompt.upstream, "arguments": _argument_names(prompt.definition)}


def resource_brief(resource: UpstreamResource) -> dict[str, Any]:
    brief: dict[str, Any] = {resource.key: resource.surfaced, "name": resource.name,
                             "summary": resource.description}
    mime = resource.definition.get("mimeType")
    if isinstance(mime, str) and mime:
        brief["mimeType"] = mime
    brief["upstream"] = resource.upstream
    return brief


def _argument_names(definition: Mapping[str, Any]) -> list[str]:
    arguments = definition.get("arguments")
    if not isinstance(arguments, list):
        return []
    return [str(a["name"]) for a in arguments if isinstance(a, Mapping) and "name" in a]


def prompt_text(prompt: UpstreamPrompt) -> search.Fields:
    return _kept(prompt, _prompt_text_fields)


def _prompt_text_fields(prompt: UpstreamPrompt) -> search.Fields:
    arguments = prompt.definition.get("arguments")
    params = [f"{a.get('name', '')} {a.get('description', '')}" for a in arguments
              if isinstance(a, Mapping)] if isinstance(arguments, list) else []
    return search.Fields(name=f"{prompt.surfaced} {prompt.title}", text=prompt.description,
                         params=" ".join(params), upstream=prompt.upstream)


def resource_text(resource: UpstreamResource) -> search.Fields:
    return _kept(resource, _resource_text_fields)


def _resource_text_fields(resource: UpstreamResource) -> search.Fields:
    return search.Fields(name=f"{resource.surfaced} {resource.name}", text=resource.description,
                         upstream=resource.upstream)


def search_text(entry: ToolEntry) -> search.Fields:
    return _kept(entry, _search_text_fields)


def _search_text_fields(entry: ToolEntry) -> search.Fields:
    # A reference tool's instructions are its action, handed over only through the gate: a
    # search must not let anyone probe their words.
    instructions = entry.instructions if entry.mode != "reference" else ""
    return search.Fields(name=f"{entry.id} {entry.name}", text=f"{entry.summary} {instructions}",
                         params=_parameter_text(entry.input_schema), upstream=entry.category)


def upstream_text(tool: UpstreamTool) -> search.Fields:
    return _kept(tool, _upstream_text_fields)


def _upstream_text_fields(tool: UpstreamTool) -> search.Fields:
    # The surfaced name is `<upstream>_<tool>` unless an expose entry chose one: only a chosen
    # one adds words; the upstream's id is its own field, with the category.
    chosen = tool.surfaced if tool.curated is not None else ""
    names = " ".join(dict.fromkeys([tool.tool, tool.display, chosen]))
    return search.Fields(name=names, text=tool.description, params=_parameter_text(tool.input_schema),
                         upstream=f"{tool.upstream} {tool.category}")


def _parameter_text(schema: Mapping[str, Any] | None) -> str:
    """Each parameter's name and description (the top level of the schema)."""
    props = schema.get("properties") if schema else None
    if not isinstance(props, Mapping):
        return ""
    words = []
    for name, spec in props.items():
        described = spec.get("description") if isinstance(spec, Mapping) else None
        words.append(f"{name} {described}" if isinstance(described, str) else str(name))
    return " ".join(words)


# id(item) -> (a weak reference to the item, its search document), while the item lives.
_DOCUMENTS: dict[int, tuple[weakref.ref[Any], search.Fields]] = {}


def _kept(item: Any, build: Callable[[Any], search.Fields]) -> search.Fields:
    """`build(item)`, made once per item while it lives (catalog items are immutable): every
    query of a catalog hands the same documents over, and `search.index` finds their index."""
    key = id(item)
    held = _DOCUMENTS.get(key)
    if held is not None and held[0]() is item:
        return held[1]

    def forget(ref: weakref.ref[Any]) -> None:
        if _DOCUMENTS.get(key, (None,))[0] is ref:
            del _DOCUMENTS[key]
    document = build(item)
    _DOCUMENTS[key] = (weakref.ref(item, forget), document)
    return document


def tool_brief(entry: ToolEntry) -> Brief:
    return Brief(entry.id, entry.name, entry.summary, entry.category, search_text(entry))


def upstream_brief(tool: UpstreamTool) -> Brief:
    return Brief(tool.surfaced, tool.display, tool.description, tool.category, upstream_text(tool))


def of_prompt(prompt: UpstreamPrompt) -> Brief:
    return Brief(prompt.surfaced, prompt.title, prompt.description, prompt.upstream, prompt_text(prompt),
                 prompt)


def of_resource(resource: UpstreamResource) -> Brief:
    return Brief(resource.surfaced, resource.name, resource.description, resource.upstream,
                 resource_text(resource), resource)
