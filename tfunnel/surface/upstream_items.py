"""Upstream prompts, resources and resource templates as the surface names them (pure).

- A prompt is surfaced as `<upstream>_<name>` (like a tool); on a collision the earlier upstream
  in config order keeps the name, and the collision is logged once per process.
- A resource URI (and a template's `uriTemplate`) is kept as the upstream wrote it when no other
  ready upstream lists the same one; when two or more do, each of them is surfaced in the
  qualified form `tfunnel+<upstream>:<original>`. The form is reversible (`split_qualified`), so
  a client may also read any URI of an upstream that way, listed or not (a URI expanded from a
  qualified template, say).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import structlog

from tfunnel.config.model import PROMPT_PREFIX, RESOURCE_PREFIX
from tfunnel.upstream.listing import RESOURCES, TEMPLATES, Kind

log = structlog.get_logger("tfunnel.surface")
_reported: set[tuple[str, str]] = set()

QUALIFIED_PREFIX = "tfunnel+"
# An RFC 6570 expression: `{var}`, `{+path}`, `{?q,lang}` ...
_EXPRESSION = re.compile(r"\{([+#./;?&]?)[^{}]*\}")


@dataclass(frozen=True)
class UpstreamPrompt:
    surfaced: str
    upstream: str
    name: str
    definition: Mapping[str, Any]
    hold: str | None = None  # why it is refused while it waits for approval, if it does
    wire: str | None = None  # under a wrap: the name clients see, its own (`surfaced` names it for the gate)

    @property
    def gate_name(self) -> str:
        return PROMPT_PREFIX + self.surfaced

    @property
    def called(self) -> str:
        """The name clients list and get it by."""
        return self.wire if self.wire is not None else self.surfaced

    @property
    def title(self) -> str:
        title = self.definition.get("title")
        return title if isinstance(title, str) and title else self.name

    @property
    def description(self) -> str:
        text = self.definition.get("description")
        return text if isinstance(text, str) else ""

    def listed(self) -> dict[str, Any]:
        return {**self.definition, "name": self.called}


@dataclass(frozen=True)
class UpstreamResource:
    """A resource (`key` "uri") or a resource template (`key` "uriTemplate") of one upstream."""

    surfaced: str
    upstream: str
    original: str
    definition: Mapping[str, Any]
    key: str = "uri"
    hold: str | None = None  # a template's: why reads through it are refused, if they are

    @property
    def gate_name(self) -> str:
        return RESOURCE_PREFIX + self.surfaced

    @property
    def name(self) -> str:
        name = self.definition.get("name")
        return name if isinstance(name, str) and name else self.original

    @property
    def description(self) -> str:
        text = self.definition.get("description")
        return text if isinstance(text, str) else ""

    def listed(self) -> dict[str, Any]:
        return {**self.definition, self.key: self.surfaced}

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        """A template's URIs, as a regular expression over the surfaced form (lenient: each
        expression matches any run of characters, a query expression may be absent)."""
        return _template_pattern(self.surfaced)

    def matches(self, uri: str) -> bool:
        return self.pattern.fullmatch(uri) is not None

    def matches_original(self, uri: str) -> bool:
        """`uri` is one of this template's URIs as its upstream writes them (unqualified)."""
        return _template_pattern(self.original).fullmatch(uri) is not None

    def covers(self, uri: str) -> bool:
        """`uri` (as its upstream writes it) could be one of this template's, however loosely:
        every expression may stand for anything, slashes included. What a hold refuses. (The
        literal parts in order, found left to right: linear, whatever the template.)"""
        literals = _EXPRESSION.split(self.original)[::2]  # split() interleaves the operators
        if len(literals) == 1:
            return uri == literals[0]
        head, *middle, tail = literals
        if len(uri) < len(head) + len(tail) or not uri.startswith(head) or not uri.endswith(tail):
            return False
        at, end = len(head), len(uri) - len(tail)
        for literal in middle:
            found = uri.find(literal, at, end)
            if found < 0:
                return False
            at = found + len(literal)
        return True


@functools.lru_cache(maxsize=1024)
def _template_pattern(template: str) -> re.Pattern[str]:
    parts: list[str] = []
    last = 0
    for match in _EXPRESSION.finditer(template):
        parts.append(re.escape(template[last:match.start()]))
        operator = match.group(1)
        parts.append("(?:[?&].*)?" if operator in ("?", "&") else ".*" if operator in ("+", "#")
                     else "[^/?#]*")
        last = match.end()
    parts.append(re.escape(template[last:]))
    return re.compile("".join(parts), re.DOTALL)


def qualified(upstream: str, uri: str) -> str:
    return f"{QUALIFIED_PREFIX}{upstream}:{uri}"


def split_qualified(uri: str, upstreams: Iterable[str]) -> tuple[str, str] | None:
    """`(upstream, original)` of a qualified URI naming one of `upstreams`, else None."""
    if uri[:len(QUALIFIED_PREFIX)].lower() != QUALIFIED_PREFIX:  # a scheme is case-insensitive
        return None
    scheme, sep, rest = uri[len(QUALIFIED_PREFIX):].partition(":")
    if not sep:
        return None
    for upstream in upstreams:  # URI schemes are case-insensitive: a client may lower-case it
        if upstream == scheme or upstream.lower() == scheme.lower():
            return upstream, rest
    return None


Holds = Mapping[str, Mapping[str, str]]  # upstream -> item key -> the refusal (`approvals`)


def assemble_prompts(ready: Mapping[str, Sequence[Mapping[str, Any]]],
                     holds: Holds | None = None, *, wrapped: bool = False) -> list[UpstreamPrompt]:
    """Name every prompt of every ready upstream (config order); `holds` marks the held.
    `wrapped`: the one upstream's prompts keep their own names on the wire."""
    holds = holds or {}
    used: set[str] = set()
    prompts: list[UpstreamPrompt] = []
    for upstream, definitions in ready.items():
        for definition in definitions:
            name = str(definition["name"])
            surfaced = f"{upstream}_{name}"
            if surfaced in used:
                if (upstream, surfaced) not in _reported:
                    _reported.add((upstream, surfaced))
                    log.warning("upstream prompt name collides; the earlier prompt keeps the name",
                                upstream=upstream, prompt=name, name=surfaced)
                continue
            used.add(surfaced)
            prompts.append(UpstreamPrompt(surfaced, upstream, name, definition,
                                          holds.get(upstream, {}).get(f"prompt:{name}"),
                                          name if wrapped else None))
    return prompts


def assemble_resources(ready: Mapping[str, Sequence[Mapping[str, Any]]],
                       kind: Kind = RESOURCES, holds: Holds | None = None) -> list[UpstreamResource]:
    """Name every resource (or, with `TEMPLATES`, template) of every ready upstream: kept when
    one upstream lists it, qualified when several do (an upstream listing one twice keeps one)."""
    assert kind in (RESOURCES, TEMPLATES)
    listers: dict[str, set[str]] = {}
    for upstream, definitions in ready.items():
        for definition in definitions:
            listers.setdefault(str(definition[kind.ident]), set()).add(upstream)
    items: list[UpstreamResource] = []
    seen: set[tuple[str, str]] = set()
    for upstream, definitions in ready.items():
        for definition in definitions:
            original = str(definition[kind.ident])
            if (upstream, original) in seen:
                continue
            seen.add((upstream, original))
            shared = len(listers[original]) > 1
            surfaced = qualified(upstream, original) if shared else original
            hold = (holds or {}).get(upstream, {}).get(f"template:{original}") if kind is TEMPLATES else None
            items.append(UpstreamResource(surfaced, upstream, original, definition, kind.ident, hold))
    return items


@dataclass(frozen=True)
class Extras:
    """The prompts, resources and templates of the ready upstreams, named (one catalog's part)."""

    prompts: tuple[UpstreamPrompt, ...] = ()
    resources: tuple[UpstreamResource, ...] = ()
    templates: tuple[UpstreamResource, ...] = ()
    # The ready upstreams that declare resources, in config order.
    resource_upstreams: tuple[str, ...] = ()

    @classmethod
    def assemble(cls, prompts: Mapping[str, Sequence[Mapping[str, Any]]],
                 resources: Mapping[str, Sequence[Mapping[str, Any]]],
                 templates: Mapping[str, Sequence[Mapping[str, Any]]],
                 resource_upstreams: Iterable[str], holds: Holds | None = None, *,
                 wrapped: bool = False) -> Extras:
        return cls(tuple(assemble_prompts(prompts, holds, wrapped=wrapped)),
                   tuple(assemble_resources(resources)),
                   tuple(assemble_resources(templates, TEMPLATES, holds)), tuple(resource_upstreams))


@dataclass(frozen=True)
class Route:
    """Where a resource URI goes: the upstream, its own URI there, and the listed resource or
    template it is (None: a URI of that upstream that no list names, such as a resource link)."""

    upstream: str
    original: str
    item: UpstreamResource | None

    @property
    def gate_name(self) -> str:
        """The gate's name of a read: `resource:<uri as the client wrote it>`, except that a URI
        read through a template is named by the template (so a matcher targets it once)."""
        return self.item.gate_name if self.item is not None else RESOURCE_PREFIX + self.original


def held_template(target: Route, extras: Extras) -> UpstreamResource | None:
    """The held template a read of `target` would go through (pure): the one it was routed by,
    else any held template of its upstream that could cover its URI however it was reached
    (qualified, unlisted, rewritten by a hook). A read of it is refused."""
    if target.item is not None and target.item.hold is not None:
        return target.item
    return next((t for t in extras.templates if t.hold is not None and t.upstream == target.upstream
                 and t.covers(target.original)), None)


def route(uri: str, extras: Extras) -> Route | str:
    """The upstream that answers for `uri`, or why none does (pure). In order: the qualified
    form; a listed resource; a template it matches (config order); the one upstream that serves
    resources, if only one does. A URI two upstreams list is ambiguous unless qualified."""
    owners = extras.resource_upstreams
    split = split_qualified(uri, owners)
    if split is not None:
        upstream, original = split
        item = next((r for r in (*extras.resources, *extras.templates)
                     if r.upstream == upstream and (r.original == original if r.key == "uri"
                                                    else r.matches_original(original))), None)
        return Route(upstream, original, item)
    for resource in extras.resources:
        if resource.surfaced == uri:
            return Route(resource.upstream, resource.original, resource)
    shared = [r for r in extras.resources if r.original == uri]
    if len(shared) == 1:  # qualified because another upstream lists it, left out of `extras`
        return Route(shared[0].upstream, shared[0].original, shared[0])
    if shared:
        forms = ", ".join(r.surfaced for r in shared)
        return f"resource {uri!r} is listed by several upstreams; read one of {forms}"
    for template in extras.templates:
        if template.surfaced == template.original and template.matches(uri):
            return Route(template.upstream, uri, template)
    if len(owners) == 1:
        return Route(owners[0], uri, None)
    return f"no resource {uri!r}"
