"""Upstream tools as the surface names them (pure).

A tool's surfaced name is the `as` of its enabled expose entry, else its default name: the tool's
own name when that already begins with the upstream id and a separator (`_`, `-` or `.`; `git`'s
`git_status` stays `git_status`), otherwise `<upstream>_<tool>`. `namePrefix: "always"` in
`expose.json` keeps `<upstream>_<tool>` for every tool (the form before this rule).

The short name is decided with the whole set, never by order: a tool keeps its short name only when
nothing else claims it, i.e. it is no local tool's or meta-tool's name, no enabled expose entry's
`as`, and no other tool's short or `<upstream>_<tool>` name. Otherwise it is `<upstream>_<tool>`
(all contenders fall back together, so adding a tool changes another's name only when the new
tool claims that very name). A tool that has a short name also answers, for its state and its
hooks only, to the other form (`former`): under "auto" `git_status` heeds a `tools.state.json`
entry and hook matchers written for `git_git_status`, under "always" `git_git_status` heeds those
written for `git_status` (fail closed: switching `namePrefix` either way, or upgrading a home
written before this rule, never silently re-enables a tool or drops a deny). The other form is not
kept when another tool is surfaced under it (that name is that tool's).

On a remaining collision the local register wins, then config order; each collision is logged once
per process (and handed to `on_collision`, which the gateway records in the audit log: surface/
writes no files).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import structlog

from tfunnel.config.expose import ExposeEntry, NamePrefix, long_name, short_name
from tfunnel.config.model import META_TOOL_NAMES
from tfunnel.surface.examples import example_args

log = structlog.get_logger("tfunnel.surface")
_reported: set[tuple[str, str, str]] = set()


@dataclass(frozen=True)
class UpstreamTool:
    surfaced: str
    upstream: str
    tool: str
    definition: Mapping[str, Any]
    curated: ExposeEntry | None = None  # its enabled expose entry (curated-direct), if any
    # Why its calls are refused while its descriptor waits for approval (`approvals`), if it does.
    hold: str | None = None
    # Under a wrap: the name clients see and call it by, its own (`surfaced` still names it for
    # visibility, hooks and the audit log, the same wrapped or not).
    wire: str | None = None
    # The other form of a tool that has a short name (`git_git_status` for `git_status` under "auto",
    # the reverse under "always"), whose state entry and hook matchers still apply to it.
    former: str | None = None

    @property
    def display(self) -> str:
        title = self.definition.get("title")
        return title if isinstance(title, str) and title else self.tool

    @property
    def description(self) -> str:
        text = self.definition.get("description")
        return text if isinstance(text, str) else ""

    @property
    def category(self) -> str:
        if self.curated is not None and self.curated.category:
            return self.curated.category
        return f"mcp:{self.upstream}"

    @property
    def input_schema(self) -> Mapping[str, Any]:
        schema = self.definition.get("inputSchema")
        return schema if isinstance(schema, Mapping) else {"type": "object"}

    @property
    def annotations(self) -> dict[str, Any]:
        """The upstream's annotations (`readOnlyHint`, `destructiveHint`, ...), as it declared them."""
        annotations = self.definition.get("annotations")
        return dict(annotations) if isinstance(annotations, Mapping) else {}

    def top_level_definition(self) -> dict[str, Any]:
        """The upstream's definition under our name: title, annotations, outputSchema kept.
        Under a wrap, the definition exactly as the upstream listed it (approved)."""
        if self.wire is not None:
            return dict(self.definition)
        return {**self.definition, "name": self.surfaced, "inputSchema": dict(self.input_schema)}

    def instructions(self) -> str:
        required = self.input_schema.get("required", [])
        required_list = [r for r in required if isinstance(r, str)] if isinstance(required, list) else []
        call = {"name": self.surfaced, "args": example_args(self.input_schema)}
        lines = [f"{self.surfaced} - forwarded from upstream MCP server {self.upstream!r} "
                 f"(upstream tool: {self.tool}).", "", self.description or "(no description)", "",
                 "Run it with toolfunnel_run_tool:", "```json", json.dumps(call, ensure_ascii=False), "```",
                 "Every call passes this gateway's policy hooks.", "", "Input schema:", "```json",
                 json.dumps(self.input_schema, indent=2, ensure_ascii=False), "```"]
        if required_list:
            lines += ["", "Required: " + ", ".join(required_list)]
        return "\n".join(lines)


def surfaced_name(upstream: str, tool: str, curated: ExposeEntry | None, name_prefix: NamePrefix = "auto",
                  contested: frozenset[str] | set[str] = frozenset()) -> str:
    """The name the surface gives `tool` of `upstream`: the `as` of its enabled expose entry
    `curated` (when it writes one), else its short name unless `contested` holds it (what else
    claims it), else `<upstream>_<tool>`."""
    if curated is not None and curated.enabled and curated.named:
        return curated.as_name
    short = short_name(upstream, tool, name_prefix)
    return short if short is not None and short not in contested else long_name(upstream, tool)


def contested_names(tools: Iterable[tuple[str, str]], expose: Iterable[ExposeEntry], taken: Iterable[str],
                    name_prefix: NamePrefix = "auto") -> set[str]:
    """The short names that may not be used, decided with the whole set `tools` ((upstream, tool)
    pairs): those a name in `taken` (local and meta-tool names), an enabled expose entry's `as`, or
    another tool (its short or `<upstream>_<tool>` name) also claims."""
    curated = {(e.upstream, e.tool): e.as_name for e in expose if e.enabled and e.named}
    claims: dict[str, int] = {}
    shorts: set[str] = set()
    for name in {*taken, *curated.values()}:
        claims[name] = claims.get(name, 0) + 1
    for upstream, tool in dict.fromkeys(tools):
        if (upstream, tool) in curated:
            continue
        own = {long_name(upstream, tool)}
        short = short_name(upstream, tool, name_prefix)
        if short is not None:
            own.add(short)
            shorts.add(short)
        for name in own:
            claims[name] = claims.get(name, 0) + 1
    return {name for name in shorts if claims[name] > 1}


Holds = Mapping[str, Mapping[str, str]]  # upstream -> item key (`tool:<name>`) -> the refusal
OnCollision = Callable[[str, str, str], None]  # upstream, its tool, the surfaced name it lost


def assemble(ready: Mapping[str, Sequence[Mapping[str, Any]]], expose: Iterable[ExposeEntry],
             taken: set[str], holds: Holds | None = None,
             on_collision: OnCollision | None = None, name_prefix: NamePrefix = "auto") -> list[UpstreamTool]:
    """Name every tool of every ready upstream (config order); `taken` holds local names;
    `holds` says which are held (their calls are refused); `on_collision` hears each collision
    the first time this process sees it; `name_prefix` is `expose.json`'s `namePrefix`."""
    return _assemble(ready, expose, set(taken) | set(META_TOOL_NAMES), holds, on_collision, name_prefix,
                     wrapped=False)


def assemble_wrapped(upstream: str, definitions: Sequence[Mapping[str, Any]], expose: Iterable[ExposeEntry],
                     holds: Holds | None = None, name_prefix: NamePrefix = "auto") -> list[UpstreamTool]:
    """The wrapped upstream's tools: each under its own name on the wire (`wire`), named as
    usual for everything else; nothing else is on the surface, so nothing else can take a name."""
    return _assemble({upstream: definitions}, expose, set(), holds, None, name_prefix, wrapped=True)


def _assemble(ready: Mapping[str, Sequence[Mapping[str, Any]]], expose: Iterable[ExposeEntry],
              used: set[str], holds: Holds | None, on_collision: OnCollision | None, name_prefix: NamePrefix,
              *, wrapped: bool) -> list[UpstreamTool]:
    holds = holds or {}
    expose = tuple(expose)
    curated = {(e.upstream, e.tool): e for e in expose if e.enabled}
    pairs = [(upstream, str(d["name"])) for upstream, definitions in ready.items() for d in definitions]
    contested = contested_names(pairs, expose, used, name_prefix)
    tools: list[UpstreamTool] = []
    for upstream, definitions in ready.items():
        for definition in definitions:
            name = str(definition["name"])
            entry = curated.get((upstream, name))
            surfaced = surfaced_name(upstream, name, entry, name_prefix, contested)
            former = _other_form(upstream, name, surfaced)
            if surfaced in used:
                key = (upstream, name, surfaced)
                if key not in _reported:
                    _reported.add(key)
                    log.warning("upstream tool name collides; the earlier tool keeps the name",
                                upstream=upstream, tool=name, name=surfaced)
                    if on_collision is not None:
                        on_collision(upstream, name, surfaced)
                continue
            used.add(surfaced)
            hold = holds.get(upstream, {}).get(f"tool:{name}")
            tools.append(UpstreamTool(surfaced, upstream, name, definition, entry, hold,
                                      name if wrapped else None, former))
    names = {tool.surfaced for tool in tools}
    return [replace(tool, former=None) if tool.former in names else tool for tool in tools]


def _other_form(upstream: str, tool: str, surfaced: str) -> str | None:
    """The form of its default name a tool is not surfaced under, if it has two (an unprefixed
    tool, `git`'s `status`, has one; a curated one under an `as` of its own has none)."""
    short = short_name(upstream, tool)
    if short is None or surfaced not in (short, long_name(upstream, tool)):
        return None
    return long_name(upstream, tool) if surfaced == short else short
