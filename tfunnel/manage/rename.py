"""Rename safety: what renaming a surfaced tool does to hook matchers and tool state (pure, no I/O).

Changing a name a tool surfaces under (an expose entry's `as`, an expose entry toggled, a local
tool's display name) while hook matchers and `tools.state.json` keep the old string would make a
deny hook silently stop firing, or bring a disabled tool back. This module owns that decision:

- `plan_rename` / `plan_renames` take the tool's names before and after (as the gate sees them,
  `ToolCall.names()`: surfaced, id or upstream tool name, display, `mcp__<upstream>__<tool>`), the
  raw hook manifest rows and the raw state document, and return the rewritten documents with a
  list of human-readable changes (`RenamePlan`), or every reason not to (`Refusal`).
- `expose_renames` finds every surfaced-name change an edit of `mcp/expose.json` causes (an entry's
  `as`, an entry toggled, `namePrefix` switched between "auto" and "always").

The policy, for the `PreToolUse`/`PostToolUse` hooks (the only events whose matcher is tried on a
tool's names), disabled ones included (an overlay may switch them on):

- a wildcard matcher (`""`, `*`, absent) is untouched;
- a matcher that is exactly a renamed name, or its `re.escape`, is rewritten to the new name
  (escaped only when it has regex metacharacters), unless it still matches another of the tool's
  names;
- any other matcher that fired for the tool before and would not after, or one that does not
  compile, refuses the rename, naming the hook; a matcher that fires through a name the rename
  does not change (the upstream tool name, the `mcp__` form) keeps firing and is untouched;
- the state entry moves from the old surfaced name to the new one (both present: refused when
  they differ, merged when equal).

Everything is checked before anything is returned; inputs are never mutated and nothing is
written: the management operations validate and write the returned documents.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfunnel.config.expose import ExposeEntry, parse_expose
from tfunnel.config.model import META_TOOL_NAMES, RESERVED_STATE_KEYS
from tfunnel.gate.gated import ToolCall
from tfunnel.gate.manifest import EVENTS, compile_matcher
from tfunnel.surface.upstream_tools import contested_names, surfaced_name

# The events whose matcher is tried on a tool call's names (gate/engine.py `_fire_for_tool`).
TOOL_EVENTS = frozenset({"PreToolUse", "PostToolUse"})
_METACHARACTERS = frozenset(".^$*+?{}[]\\|()")


@dataclass(frozen=True)
class ToolNames:
    """One tool's names as the gate sees them (`ToolCall`): `surfaced` (also its `tools.state.json`
    key: a local tool's id, an upstream tool's surfaced name), `tool_id` (a local tool's id, an
    upstream tool's own name), `display`, and `upstream` (the upstream's id; None for a local tool)."""

    surfaced: str
    tool_id: str
    display: str
    upstream: str | None = None

    def _call(self) -> ToolCall:
        return ToolCall(self.surfaced, self.tool_id, self.display, args={}, upstream=self.upstream)

    def names(self) -> tuple[str, ...]:
        """Every name a matcher is tried on (`ToolCall.names()`)."""
        return self._call().names()

    def fields(self) -> tuple[str, str, str, str]:
        """surfaced, tool id, display, Claude Code name: the names a rename pairs old with new."""
        return self.surfaced, self.tool_id, self.display, self._call().claude_code_name()


@dataclass(frozen=True)
class Rename:
    """One tool whose names change from `old` to `new`."""

    old: ToolNames
    new: ToolNames

    def pairs(self) -> list[tuple[str, str]]:
        """(old name, new name) for each of the tool's names that changes."""
        return [(o, n) for o, n in zip(self.old.fields(), self.new.fields(), strict=True) if o and o != n]

    def label(self) -> str:
        return f"{self.old.surfaced!r} -> {self.new.surfaced!r}" if self.old.surfaced != self.new.surfaced \
            else f"{self.old.surfaced!r} (display {self.old.display!r} -> {self.new.display!r})"


@dataclass(frozen=True)
class RenamePlan:
    """The documents to write, what changed in them, and what else the rename does (notices: a hook
    that starts firing for the renamed tool, a state entry already under the new name)."""

    manifest_rows: list[Any]
    state_doc: dict[str, Any]
    changes: tuple[str, ...] = ()
    notices: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refusal:
    """Why the rename may not happen: every reason, each naming what it is about."""

    reasons: tuple[str, ...]


def plan_rename(old: ToolNames, new: ToolNames, manifest_rows: Sequence[Any],
                state_doc: Mapping[str, Any]) -> RenamePlan | Refusal:
    """The manifest rows (`hooks` of `hooks/hooks.manifest.json`) and `tools/tools.state.json`
    rewritten for one tool renamed from `old` to `new`, or why not."""
    return plan_renames([Rename(old, new)], manifest_rows, state_doc)


def plan_renames(renames: Sequence[Rename], manifest_rows: Sequence[Any],
                 state_doc: Mapping[str, Any]) -> RenamePlan | Refusal:
    """As `plan_rename`, for renames that happen together (one edit; a swap of two names is fine)."""
    renames = [r for r in renames if r.pairs()]
    problems: list[str] = []
    changes: list[str] = []
    notices: list[str] = []
    rows = [_hook_row(index, row, renames, problems, changes, notices)
            for index, row in enumerate(manifest_rows)]
    state = _move_state(renames, state_doc, problems, changes, notices)
    if problems:
        return Refusal(tuple(problems))
    return RenamePlan(rows, state, tuple(changes), tuple(notices))


def readable_pattern(name: str) -> str:
    """A matcher for exactly `name`: the name itself unless it has regex metacharacters."""
    return re.escape(name) if _METACHARACTERS.intersection(name) else name


def hook_id(index: int, row: Mapping[str, Any]) -> str:
    """A manifest row's id, or the one the manifest synthesizes for a row without one."""
    given = row.get("id")
    if isinstance(given, str) and given:
        return given
    event = row.get("event")
    return f"{event if event in EVENTS else 'hook'}#{index}"


def _fires(pattern: re.Pattern[str] | None, names: Sequence[str]) -> bool:
    return pattern is None or any(pattern.fullmatch(name) for name in names)


def _hook_row(index: int, row: Any, renames: Sequence[Rename], problems: list[str], changes: list[str],
              notices: list[str]) -> Any:
    """The row as it must be after the renames (the same row when untouched)."""
    if not isinstance(row, dict) or row.get("event") not in TOOL_EVENTS or row.get("matcher") is None:
        return row
    matcher = row["matcher"]
    where = f"hook {hook_id(index, row)!r} ({row['event']}, matcher {matcher!r})"
    if not isinstance(matcher, str):
        problems.append(f"{where}: the matcher is not a string, so whether it still fires for the "
                        "renamed tool cannot be checked; fix the manifest first")
        return row
    try:
        pattern = compile_matcher(matcher)
    except re.error as exc:
        problems.append(f"{where}: the matcher does not compile ({exc}), so whether it still fires for "
                        "the renamed tool cannot be checked; fix the manifest first")
        return row
    if pattern is None:  # a wildcard fires for every name
        return row
    # Rewritten only when the tool would otherwise lose it: one that still matches an unchanged name
    # (a local tool whose id equals its old display name) keeps its matcher as written.
    targets = {readable_pattern(n) for r in renames if not _fires(pattern, r.new.names())
               for o, n in r.pairs() if matcher in (o, re.escape(o))}
    if len(targets) > 1:
        problems.append(f"{where}: names a tool renamed to more than one name "
                        f"({', '.join(sorted(map(repr, targets)))}); rewrite it by hand")
        return row
    rewritten = targets.pop() if targets else matcher
    after = re.compile(rewritten) if rewritten != matcher else pattern
    for rename in renames:
        before_fires, after_fires = _fires(pattern, rename.old.names()), _fires(after, rename.new.names())
        if before_fires and not after_fires:
            problems.append(f"{where}: would stop firing for the renamed tool {rename.label()}; "
                            "change the matcher first (or make it match both names)")
        elif after_fires and not before_fires:
            notices.append(f"{where}: will start firing for the renamed tool {rename.label()}")
    if rewritten == matcher:
        return row
    changes.append(f"{where}: matcher rewritten to {rewritten!r}")
    return {**row, "matcher": rewritten}


def _move_state(renames: Sequence[Rename], doc: Mapping[str, Any], problems: list[str], changes: list[str],
                notices: list[str]) -> dict[str, Any]:
    """`doc` with each renamed tool's entry under its new surfaced name (document order kept)."""
    if not isinstance(doc, Mapping):
        problems.append("tools.state.json: must be a JSON object; fix it first")
        return {}
    move_to: dict[str, str] = {}
    for rename in renames:
        old, new = rename.old.surfaced, rename.new.surfaced
        if old == new:
            continue
        for key in (old, new):
            if key in RESERVED_STATE_KEYS:
                problems.append(f"tools.state.json: {key!r} is a reserved key, not a tool name; "
                                f"the rename {rename.label()} cannot move its state")
        if new in move_to.values():
            problems.append(f"tools.state.json: two tools would be renamed to {new!r}")
        move_to[old] = new
    state: dict[str, Any] = {}
    for key, value in doc.items():
        target = move_to.get(key)
        if target is None:
            state[key] = value
        elif target in doc and target not in move_to:  # the new name already has an entry
            if doc[target] != value:
                problems.append(f"tools.state.json: both {key!r} ({value!r}) and {target!r} "
                                f"({doc[target]!r}) have an entry and they differ; keep one of them first")
            else:
                changes.append(f"tools.state.json: {key!r} merged into the equal entry {target!r}")
        else:
            state[target] = value
            changes.append(f"tools.state.json: entry {key!r} moved to {target!r}")
    for old, new in move_to.items():
        if old not in doc and new in doc and new not in move_to:
            notices.append(f"tools.state.json: the entry {new!r} ({doc[new]!r}) already there now applies "
                           f"to the renamed tool {old!r} -> {new!r}")
    return state


def expose_renames(old_doc: Mapping[str, Any], new_doc: Mapping[str, Any], local_names: Collection[str],
                   displays: Mapping[tuple[str, str], str] | None = None) -> list[Rename] | Refusal:
    """Every upstream tool whose surfaced name an edit of `mcp/expose.json` changes (`old_doc` to
    `new_doc`, both raw documents, valid: `parse_expose` raises `ConfigError` otherwise).

    An upstream tool's surfaced name depends on config and on the tools listed with it (the `as` of
    its enabled expose entry, else its short or `<upstream>_<tool>` name, `surface/upstream_tools`),
    so the tools those entries name and the tools known to be listed are what is compared.
    `local_names` are the register's ids and display names (they, and the meta-tools, win a name);
    `displays` the listed upstream tools and their titles where known, `(upstream, tool) -> title`
    (default: the tool's own name). A tool that was shadowed before is no rename (nothing referred to
    it by that name); one whose upstream is added or removed appears or leaves. Refused: a new name
    that a local tool, a meta-tool or another of the edit's tools already has."""
    before, after = parse_expose(dict(old_doc)), parse_expose(dict(new_doc))
    taken = set(local_names) | set(META_TOOL_NAMES)
    old_entries, new_entries = _entries(before.expose), _entries(after.expose)
    keys = list(dict.fromkeys([*old_entries, *new_entries, *(displays or {})]))
    both = {u.id for u in before.upstreams} & {u.id for u in after.upstreams}
    listed = [(u, t) for u, t in (displays or {}) if u in both]
    old_contested = contested_names(listed, before.expose, taken, before.name_prefix)
    new_contested = contested_names(listed, after.expose, taken, after.name_prefix)
    named_after: dict[str, list[tuple[str, str]]] = {}
    renames: list[Rename] = []
    problems: list[str] = []
    for upstream, tool in keys:
        old_name = surfaced_name(upstream, tool, _enabled(old_entries.get((upstream, tool))),
                                 before.name_prefix, old_contested)
        new_name = surfaced_name(upstream, tool, _enabled(new_entries.get((upstream, tool))),
                                 after.name_prefix, new_contested)
        if upstream in both:
            named_after.setdefault(new_name, []).append((upstream, tool))
        if old_name == new_name or upstream not in both or old_name in taken:
            continue
        if new_name in taken:
            problems.append(f"expose ({upstream!r}, {tool!r}): the new name {new_name!r} is a local or meta "
                            "tool's name, which wins: the upstream tool would leave the surface")
            continue
        display = (displays or {}).get((upstream, tool), tool)
        renames.append(Rename(ToolNames(old_name, tool, display, upstream),
                              ToolNames(new_name, tool, display, upstream)))
    for rename in renames:
        for upstream, tool in named_after[rename.new.surfaced]:
            if (upstream, tool) != (rename.new.upstream, rename.new.tool_id):
                problems.append(f"expose ({rename.new.upstream!r}, {rename.new.tool_id!r}): the new name "
                                f"{rename.new.surfaced!r} is also the name of {upstream!r}'s tool {tool!r}")
    return Refusal(tuple(problems)) if problems else renames


def _entries(expose: Sequence[ExposeEntry]) -> dict[tuple[str, str], ExposeEntry]:
    return {(e.upstream, e.tool): e for e in expose}


def _enabled(entry: ExposeEntry | None) -> ExposeEntry | None:
    return entry if entry is not None and entry.enabled else None
