"""Surfaced names and visibility: which tools a client may list, read and run (pure).

A `Catalog` is an immutable snapshot built from the register and the state overlay (and, once
upstreams exist, their tools). It is rebuilt on every config change and swapped whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from tfunnel.config.model import META_TOOL_NAMES, Register, ToolEntry, ToolState, Visibility
from tfunnel.surface import briefs, profiles
from tfunnel.surface.briefs import Listing, prompt_brief, resource_brief
from tfunnel.surface.profiles import Chosen
from tfunnel.surface.upstream_items import Extras, Route, UpstreamPrompt, UpstreamResource, route
from tfunnel.surface.upstream_tools import UpstreamTool

Kind = Literal["meta", "local", "upstream", "prompt", "resource"]
# A tool without an inputSchema accepts any arguments; advertise exactly that.
_ANY_OBJECT_SCHEMA: Mapping[str, Any] = {"type": "object"}


@dataclass(frozen=True)
class Resolved:
    """A visibility with the per-kind defaults applied."""

    enabled: bool
    hot: bool
    hidden: bool


def resolve_visibility(kind: Kind, vis: Visibility | None) -> Resolved:
    """Defaults: enabled; hot only for meta-tools; never hidden."""
    vis = vis or Visibility()
    return Resolved(
        enabled=vis.enabled is not False,
        hot=vis.hot if vis.hot is not None else kind == "meta",
        hidden=vis.hidden is True,
    )


def merged_visibility(own: Visibility | None, former: Visibility | None) -> Visibility | None:
    """A tool's entry with its former name's: disabled or hidden if either says so; `hot` its own
    unless only the former sets it."""
    if former is None or own is None:
        return own or former
    enabled = False if False in (own.enabled, former.enabled) else own.enabled if own.enabled is not None \
        else former.enabled
    hidden = True if True in (own.hidden, former.hidden) else own.hidden if own.hidden is not None \
        else former.hidden
    return Visibility(enabled=enabled, hidden=hidden, hot=own.hot if own.hot is not None else former.hot)


def local_input_schema(entry: ToolEntry) -> dict[str, Any]:
    schema = dict(entry.input_schema) if entry.input_schema is not None else dict(_ANY_OBJECT_SCHEMA)
    schema.setdefault("type", "object")
    return schema


@dataclass(frozen=True)
class Wrap:
    """An active wrap (`tfunnel wrap`): `upstream` is the whole surface; `server` is the id its
    tools carry in hooks' Claude Code names (`mcp__<server>__<tool>`: the upstream's, or `--as`)."""

    upstream: str
    server: str

    @classmethod
    def of(cls, state: ToolState) -> Wrap | None:
        if state.passthrough is None:
            return None
        return cls(state.passthrough, state.passthrough_as or state.passthrough)


@dataclass(frozen=True)
class CatalogRow:
    """One tool as `tfunnel tools` shows it."""

    name: str
    kind: Kind
    display: str
    category: str
    mode: str
    visibility: Resolved


class Catalog:
    def __init__(self, register: Register, state: ToolState, upstream: Sequence[UpstreamTool] = (),
                 extras: Extras | None = None, *, profile: Chosen | None = None) -> None:
        """Under a wrap (`state.passthrough`), `upstream` and `extras` are the wrapped upstream's
        alone, named for the wrap (`upstream_tools.assemble_wrapped`). With `profile`, the
        catalog is one client profile's view of the same surface (`view`)."""
        self.register = register
        self.profile = profile
        self.state = state
        self.wrap = Wrap.of(state)
        self.upstream = tuple(upstream)
        self.extras = extras or Extras()
        self._prompts = {p.called: p for p in self.extras.prompts}
        self._wired = {tool.wire: tool for tool in self.upstream if tool.wire is not None}
        self._by_id = register.by_id()
        self._by_display: dict[str, ToolEntry] = {}
        for entry in register.tools:
            self._by_display.setdefault(entry.name, entry)
        self._upstream = {tool.surfaced: tool for tool in self.upstream}
        # Resolved visibility by (name, kind): a catalog is rebuilt whenever the state changes.
        self._visibility: dict[tuple[str, Kind], Resolved] = {}
        self._views: dict[Chosen, Catalog] = {}
        self._listings: dict[str, Listing] = {}  # by kind (tools, prompts, resources), built on first use
        # Under a profile: each prompt and resource, by its gate name.
        self._items: dict[tuple[str, Kind], UpstreamPrompt | UpstreamResource] = {}
        self._excluded: set[tuple[str, Kind]] = set()  # what the profile leaves out, as seen
        # What a URI no upstream (or several) answers for is routed over under a profile: its own
        # upstreams' resources only (an ambiguity message must not name the rest).
        self._routable = self.extras
        if profile is not None and profile.profile.upstreams is not None:
            def mine(upstream: str) -> bool:
                return profiles.allows_resource(profile.profile, upstream)

            self._routable = replace(
                self.extras, resources=tuple(r for r in self.extras.resources if mine(r.upstream)),
                templates=tuple(t for t in self.extras.templates if mine(t.upstream)),
                resource_upstreams=tuple(u for u in self.extras.resource_upstreams if mine(u)))
        if profile is not None:
            self._items = {(p.gate_name, "prompt"): p for p in self.extras.prompts}
            self._items.update({(r.gate_name, "resource"): r
                                for r in (*self.extras.resources, *self.extras.templates)})

    def view(self, chosen: Chosen | None) -> Catalog:
        """This surface as a client with profile `chosen` sees it: what the profile leaves out is
        disabled (absent from every listing, refused on every path), its mode and `alwaysLoad`
        put tools on the top level. Built once per profile per catalog."""
        if chosen is None or chosen.neutral or self.profile is not None:
            return self
        view = self._views.get(chosen)
        if view is None:
            view = self._views[chosen] = Catalog(self.register, self.state, self.upstream, self.extras,
                                                 profile=chosen)
        return view

    def _profiled(self, name: str, kind: Kind, resolved: Resolved) -> Resolved:
        """`resolved` under this view's profile (meta-tools follow the state alone)."""
        assert self.profile is not None
        profile, allowed = self.profile.profile, True
        names: tuple[str, ...] = (name,)
        if kind == "local":
            entry = self._by_id.get(name)
            names = (name, entry.name) if entry is not None else names
            management = entry is not None and entry.invoke is not None and entry.invoke.type == "builtin"
            allowed = profiles.allows_tool(profile, names, None, management=management)
        elif kind == "upstream":
            tool = self._upstream.get(name)
            allowed = tool is None or profiles.allows_tool(profile, names, tool.upstream)
        elif kind in ("prompt", "resource"):
            item = self._items.get((name, kind))
            allowed = item is not None and (
                profiles.allows_prompt(profile, item.surfaced, item.upstream) if kind == "prompt"
                else profiles.allows_resource(profile, item.upstream))
        if not allowed:
            self._excluded.add((name, kind))
            return Resolved(enabled=False, hot=False, hidden=True)
        if kind in ("local", "upstream") and not resolved.hot \
                and (self.profile.full or profiles.always_loaded(profile, names)):
            return Resolved(resolved.enabled, True, resolved.hidden)
        return resolved

    def left_out(self, name: str, kind: Kind) -> bool:
        """This view's profile leaves out the tool (or prompt, resource) `name`."""
        if self.profile is None:
            return False
        self.visibility(name, kind)
        return (name, kind) in self._excluded

    def outside_profile(self, name: str) -> bool:
        """A tool the whole surface has under `name` that this view's profile leaves out."""
        entry = self._by_id.get(name) or self._by_display.get(name)
        if entry is not None:
            return self.left_out(entry.id, "local")
        tool = self._upstream.get(name) or self._wired.get(name)
        return tool is not None and self.left_out(tool.surfaced, "upstream")

    def local_names(self) -> set[str]:
        """Every name a local tool answers to: upstream tools may not take these."""
        return set(self._by_id) | set(self._by_display)

    def find_upstream(self, name: str) -> UpstreamTool | None:
        """The upstream tool surfaced as `name` (enabled or not), unless the profile leaves it out."""
        tool = self._upstream.get(name)
        return None if tool is None or self.left_out(name, "upstream") else tool

    def enabled_upstream(self, name: str) -> UpstreamTool | None:
        tool = self._upstream.get(name)
        if tool is None or not self.visibility(name, "upstream").enabled:
            return None
        return tool

    def direct_upstream(self, name: str) -> UpstreamTool | None:
        """An upstream tool on the top level: curated-direct, or promoted hot; enabled either way."""
        tool = self.enabled_upstream(name)
        if tool is None or tool.wire is not None \
                or (tool.curated is None and not self.visibility(name, "upstream").hot):
            return None
        return tool

    def visibility(self, name: str, kind: Kind) -> Resolved:
        """An upstream tool under a short name also heeds the entry of its former `<upstream>_<tool>`
        name (fail closed: either one disabling or hiding it does)."""
        resolved = self._visibility.get((name, kind))
        if resolved is None:
            vis = self.state.entries.get(name)
            tool = self._upstream.get(name) if kind == "upstream" else None
            if tool is not None and tool.former is not None:
                vis = merged_visibility(vis, self.state.entries.get(tool.former))
            resolved = resolve_visibility(kind, vis)
            if self.profile is not None and kind != "meta":
                resolved = self._profiled(name, kind, resolved)
            self._visibility[name, kind] = resolved
        return resolved

    def find_local(self, name: str) -> ToolEntry | None:
        """A register entry by id, else by display name (enabled or not), unless the profile
        leaves it out."""
        entry = self._by_id.get(name) or self._by_display.get(name)
        return None if entry is None or self.left_out(entry.id, "local") else entry

    def enabled_local(self, name: str) -> ToolEntry | None:
        entry = self.find_local(name)
        if entry is None or not self.visibility(entry.id, "local").enabled:
            return None
        return entry

    def meta_callable(self, name: str) -> bool:
        """A meta-tool is on the top level (and callable) when it is enabled and hot."""
        if name not in META_TOOL_NAMES or self.wrap is not None:  # a wrap hides the meta-tools
            return False
        vis = self.visibility(name, "meta")
        return vis.enabled and vis.hot

    def hot_local(self, name: str) -> ToolEntry | None:
        """A local tool promoted to the top level, by its surfaced name (its id)."""
        entry = self._by_id.get(name)
        if entry is None or self.wrap is not None:
            return None
        vis = self.visibility(entry.id, "local")
        return entry if vis.enabled and vis.hot else None

    def wrapped_tool(self, name: str) -> UpstreamTool | None:
        """Under a wrap: the enabled tool clients call `name` (its own name), if there is one."""
        tool = self._wired.get(name)
        if tool is None or not self.visibility(tool.surfaced, "upstream").enabled:
            return None
        return tool

    def top_level(self, meta_definitions: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
        """`tools/list` in funnel mode: hot meta-tools, then hot enabled local tools, then the
        curated and promoted upstream tools. Under a wrap: the wrapped upstream's enabled tools,
        as it lists them (no meta-tool, no register tool)."""
        if self.wrap is not None:
            return [tool.top_level_definition() for tool in self.upstream
                    if self.wrapped_tool(tool.wire or "") is tool]
        tools = [dict(meta_definitions[name]) for name in META_TOOL_NAMES if self.meta_callable(name)]
        for entry in self.register.tools:
            if self.hot_local(entry.id) is not None:
                tools.append({
                    "name": entry.id,
                    "title": entry.name,
                    "description": entry.summary or entry.name,
                    "inputSchema": local_input_schema(entry),
                })
        direct = [t for t in self.upstream if self.direct_upstream(t.surfaced) is not None]
        # Curated-direct entries first (the operator chose them), then hot promotions.
        direct.sort(key=lambda t: t.curated is None)
        tools += [t.top_level_definition() for t in direct]
        return tools

    def briefs(
        self, *, filter: str = "", category: str = "", query: str = "", limit: int | None = None
    ) -> list[dict[str, str]]:
        """Enabled tools as `{id, name, summary, category}`: local first (register order), then
        upstream tools (config order)."""
        listing = self._listings.get("tools")
        if listing is None:
            candidates = [briefs.tool_brief(e) for e in self.register.tools
                          if self.visibility(e.id, "local").enabled]
            candidates += [briefs.upstream_brief(t) for t in self.upstream
                           if self.visibility(t.surfaced, "upstream").enabled]
            listing = self._listings["tools"] = Listing(candidates)
        return [{"id": b.id, "name": b.name, "summary": b.summary, "category": b.category}
                for b in listing.narrow(filter, query, limit, category)]

    def prompt_briefs(self, *, filter: str = "", query: str = "", limit: int | None = None
                      ) -> list[dict[str, Any]]:
        """Enabled prompts as `{name, title, summary, upstream, arguments: [names]}` (config
        order), narrowed like `briefs`."""
        listing = self._listings.get("prompts")
        if listing is None:
            listing = self._listings["prompts"] = Listing(briefs.of_prompt(p) for p in self.prompts())
        return [prompt_brief(b.item) for b in listing.narrow(filter, query, limit)
                if isinstance(b.item, UpstreamPrompt)]

    def resource_briefs(self, *, filter: str = "", query: str = "", limit: int | None = None
                        ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Enabled resources as `{uri, name, summary, mimeType?, upstream}` and templates as
        `{uriTemplate, name, summary, mimeType?, upstream}`, narrowed like `briefs` as one list
        (resources first; `limit` counts both)."""
        listing = self._listings.get("resources")
        if listing is None:
            listing = self._listings["resources"] = Listing(
                briefs.of_resource(r) for r in (*self.resources(), *self.templates()))
        chosen = [b.item for b in listing.narrow(filter, query, limit)
                  if isinstance(b.item, UpstreamResource)]
        return ([resource_brief(r) for r in chosen if r.key == "uri"],
                [resource_brief(r) for r in chosen if r.key != "uri"])

    # --- prompts and resources: visible unless their gate name is disabled in the state file ---

    def _shown(self, gate_name: str, kind: Kind) -> bool:
        return self.visibility(gate_name, kind).enabled

    def prompts(self) -> list[UpstreamPrompt]:
        return [p for p in self.extras.prompts if self._shown(p.gate_name, "prompt")]

    def prompt(self, name: str) -> UpstreamPrompt | str:
        """The enabled prompt clients get as `name` (surfaced, or its own under a wrap), or why
        there is none."""
        prompt = self._prompts.get(name)
        if prompt is None or self.left_out(prompt.gate_name, "prompt"):
            return f"no prompt {name!r}"
        if not self._shown(prompt.gate_name, "prompt"):
            return f"prompt {name!r} is disabled"
        return prompt

    def resources(self) -> list[UpstreamResource]:
        return [r for r in self.extras.resources if self._shown(r.gate_name, "resource")]

    def templates(self) -> list[UpstreamResource]:
        return [t for t in self.extras.templates if self._shown(t.gate_name, "resource")]

    def resource(self, uri: str) -> Route | str:
        """Where reading `uri` goes (`upstream_items.route`), or why nowhere; a disabled
        resource (or template) is refused."""
        found = route(uri, self.extras)
        if self.profile is not None:
            mine = profiles.allows_resource
            if isinstance(found, Route) and not mine(self.profile.profile, found.upstream):
                return f"no resource {uri!r}"
            if isinstance(found, str):  # ambiguous or unknown over all: over the profile's own
                found = route(uri, self._routable)
        if isinstance(found, Route) and found.item is not None \
                and not self._shown(found.item.gate_name, "resource"):
            return f"resource {uri!r} is disabled"
        return found

    def rows(self) -> list[CatalogRow]:
        rows = [CatalogRow(name, "meta", name, "meta", "meta", self.visibility(name, "meta"))
                for name in META_TOOL_NAMES]
        rows += [CatalogRow(e.id, "local", e.name, e.category, e.mode, self.visibility(e.id, "local"))
                 for e in self.register.tools]
        rows += [CatalogRow(t.surfaced, "upstream", t.display, t.category, "upstream",
                            self.visibility(t.surfaced, "upstream")) for t in self.upstream]
        return rows
