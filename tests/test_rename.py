"""Rename safety (manage/rename.py): hook matchers and tool state follow a surfaced-name change."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tfunnel.manage.rename import (
    Refusal,
    Rename,
    RenamePlan,
    ToolNames,
    expose_renames,
    plan_rename,
    plan_renames,
    readable_pattern,
)

# An upstream tool whose expose entry gets an `as` (toggled on, or edited).
TIME_OLD = ToolNames("time_get_current_time", "get_current_time", "get_current_time", "time")
TIME_NEW = ToolNames("now", "get_current_time", "get_current_time", "time")
# Names with regex metacharacters.
FS_OLD = ToolNames("fs.read", "read", "read", "fs")
FS_NEW = ToolNames("fs.read-file", "read", "read", "fs")
FS_PLAIN = ToolNames("fsread", "read", "read", "fs")
# A local tool whose display name changes (its id, and so its state key, stays).
HASH_OLD = ToolNames("hash", "hash", "Hash it")
HASH_NEW = ToolNames("hash", "hash", "Hash file")
SAME_OLD = ToolNames("x", "x", "x")
SAME_NEW = ToolNames("x", "x", "Ex")

UNTOUCHED = "untouched"
REFUSED = "refused"


def hook(matcher: str | None, event: str = "PreToolUse", hook_id: str = "guard",
         **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"id": hook_id, "event": event, "command": "deny.sh", "enabled": True, **extra}
    if matcher is not None:
        row["matcher"] = matcher
    return row


def planned(result: RenamePlan | Refusal) -> RenamePlan:
    assert isinstance(result, RenamePlan), result
    return result


def refused(result: object) -> Refusal:
    assert isinstance(result, Refusal), result
    return result


@pytest.mark.parametrize(("old", "new", "matcher", "expected"), [
    pytest.param(TIME_OLD, TIME_NEW, "time_get_current_time", "now", id="exact-rewritten"),
    pytest.param(FS_OLD, FS_NEW, r"fs\.read", r"fs\.read\-file", id="escaped-rewritten-escaped"),
    pytest.param(FS_OLD, FS_NEW, "fs.read", r"fs\.read\-file", id="exact-with-metachar-rewritten-escaped"),
    pytest.param(FS_OLD, FS_PLAIN, r"fs\.read", "fsread", id="escaped-rewritten-readable"),
    pytest.param(HASH_OLD, HASH_NEW, "Hash it", "Hash file", id="local-display-rewritten"),
    pytest.param(TIME_OLD, TIME_NEW, "", UNTOUCHED, id="wildcard-empty"),
    pytest.param(TIME_OLD, TIME_NEW, "*", UNTOUCHED, id="wildcard-star"),
    pytest.param(TIME_OLD, TIME_NEW, None, UNTOUCHED, id="wildcard-absent"),
    pytest.param(TIME_OLD, TIME_NEW, "time_.*", REFUSED, id="regex-matching-old-only"),
    pytest.param(TIME_OLD, TIME_NEW, "^time_get_current_time$", REFUSED, id="anchored-regex-old-only"),
    pytest.param(HASH_OLD, HASH_NEW, "Hash i.", REFUSED, id="regex-on-old-display-only"),
    pytest.param(TIME_OLD, TIME_NEW, "time_get_current_time|now", UNTOUCHED, id="regex-matching-both"),
    pytest.param(TIME_OLD, TIME_NEW, ".*_?(time|now)", UNTOUCHED, id="regex-matching-both-differently"),
    pytest.param(HASH_OLD, HASH_NEW, "Hash.*", UNTOUCHED, id="regex-on-both-displays"),
    pytest.param(TIME_OLD, TIME_NEW, "mcp__time__.*", UNTOUCHED, id="via-mcp-form"),
    pytest.param(TIME_OLD, TIME_NEW, "mcp__time__get_current_time", UNTOUCHED, id="exact-mcp-form"),
    pytest.param(TIME_OLD, TIME_NEW, "get_current_time", UNTOUCHED, id="via-upstream-tool-name"),
    pytest.param(TIME_OLD, TIME_NEW, "(time_|mcp__time__)get_current_time", UNTOUCHED,
                 id="old-surfaced-and-mcp-form"),
    pytest.param(HASH_OLD, HASH_NEW, "hash", UNTOUCHED, id="via-local-id"),
    pytest.param(SAME_OLD, SAME_NEW, "x", UNTOUCHED, id="exact-old-display-still-the-id"),
    pytest.param(TIME_OLD, TIME_NEW, "other_tool", UNTOUCHED, id="matches-neither"),
    pytest.param(TIME_OLD, TIME_NEW, "now", UNTOUCHED, id="matches-new-only"),
    pytest.param(TIME_OLD, TIME_NEW, "time_(", REFUSED, id="uncompilable"),
])
def test_matcher_policy(old: ToolNames, new: ToolNames, matcher: str | None, expected: str) -> None:
    """Exact (or escaped) matchers follow the rename, wildcards and matchers firing through an
    unchanged name stay, anything that would stop firing (or cannot be checked) refuses."""
    row = {**hook(matcher), "x-note": {"kept": True}}
    result = plan_rename(old, new, [row], {})
    if expected == REFUSED:
        (reason,) = refused(result).reasons
        assert "hook 'guard' (PreToolUse, matcher " in reason and repr(matcher) in reason
        return
    plan = planned(result)
    if expected == UNTOUCHED:
        assert plan.manifest_rows == [row] and plan.changes == ()
    else:
        assert plan.manifest_rows == [{**row, "matcher": expected}]  # every other field verbatim
        assert plan.changes == (f"hook 'guard' (PreToolUse, matcher {matcher!r}): matcher rewritten to "
                                f"{expected!r}",)


def test_a_refusal_says_why_and_names_the_hook() -> None:
    reason, = refused(plan_rename(TIME_OLD, TIME_NEW, [hook("time_.*", "PostToolUse", "audit")], {})).reasons
    assert reason.startswith("hook 'audit' (PostToolUse, matcher 'time_.*'): would stop firing for the "
                             "renamed tool 'time_get_current_time' -> 'now'")
    reason, = refused(plan_rename(TIME_OLD, TIME_NEW, [hook("(")], {})).reasons
    assert reason.startswith("hook 'guard' (PreToolUse, matcher '('): the matcher does not compile")


@pytest.mark.parametrize("row", [
    pytest.param(hook("time_.*", "SessionStart"), id="not-a-tool-event"),
    pytest.param(hook("(", "Stop"), id="uncompilable-on-a-non-tool-event"),
    pytest.param(hook("time_.*", enabled=False), id="disabled-still-checked"),
    pytest.param("not a row", id="not-an-object"),
])
def test_rows_that_matchers_do_not_concern(row: Any) -> None:
    """Only PreToolUse/PostToolUse matchers are tried on tool names; a disabled hook still counts."""
    result = plan_rename(TIME_OLD, TIME_NEW, [row], {})
    if isinstance(row, dict) and row.get("enabled") is False:
        assert isinstance(result, Refusal)
    else:
        assert planned(result).manifest_rows == [row]


def test_a_row_without_an_id_is_named_as_the_manifest_names_it() -> None:
    row = {"event": "PreToolUse", "matcher": "time_.*", "command": "x"}
    reason, = refused(plan_rename(TIME_OLD, TIME_NEW, [hook("*"), row], {})).reasons
    assert reason.startswith("hook 'PreToolUse#1' ")


def test_a_matcher_that_starts_firing_is_a_notice() -> None:
    plan = planned(plan_rename(TIME_OLD, TIME_NEW, [hook("no.*")], {}))
    assert plan.notices == ("hook 'guard' (PreToolUse, matcher 'no.*'): will start firing for the renamed "
                            "tool 'time_get_current_time' -> 'now'",)


DENIED = {"enabled": False}
HOT = {"hot": True}


@pytest.mark.parametrize(("renames", "state", "expected"), [
    pytest.param([(TIME_OLD, TIME_NEW)], {"a": HOT, "time_get_current_time": DENIED, "z": HOT},
                 {"a": HOT, "now": DENIED, "z": HOT}, id="moved-in-place"),
    pytest.param([(TIME_OLD, TIME_NEW)], {"time_get_current_time": DENIED, "now": {"hot": True}}, REFUSED,
                 id="both-differ"),
    pytest.param([(TIME_OLD, TIME_NEW)], {"time_get_current_time": DENIED, "now": {"enabled": False}},
                 {"now": DENIED}, id="both-equal-merged"),
    pytest.param([(TIME_OLD, TIME_NEW)], {"other": DENIED, "passthrough": "time"},
                 {"other": DENIED, "passthrough": "time"}, id="no-entry"),
    pytest.param([(HASH_OLD, HASH_NEW)], {"hash": DENIED}, {"hash": DENIED}, id="local-display-keeps-id-key"),
    pytest.param([(TIME_OLD, TIME_NEW), (TIME_NEW, TIME_OLD)], {"time_get_current_time": DENIED, "now": HOT},
                 {"now": DENIED, "time_get_current_time": HOT}, id="swap"),
    pytest.param([(TIME_OLD, ToolNames("passthrough", "get_current_time", "get_current_time", "time"))],
                 {}, REFUSED, id="reserved-key"),
])
def test_state_policy(renames: list[tuple[ToolNames, ToolNames]], state: dict[str, Any],
                      expected: dict[str, Any] | str) -> None:
    """The state entry moves with the surfaced name; two different entries refuse, equal ones merge."""
    result = plan_renames([Rename(o, n) for o, n in renames], [], state)
    if expected == REFUSED:
        assert refused(result).reasons[0].startswith("tools.state.json: ")
    else:
        plan = planned(result)
        assert plan.state_doc == expected
        assert list(plan.state_doc) == list(expected)  # document order kept


def test_state_changes_are_described() -> None:
    moved = planned(plan_rename(TIME_OLD, TIME_NEW, [], {"time_get_current_time": DENIED}))
    assert moved.changes == ("tools.state.json: entry 'time_get_current_time' moved to 'now'",)
    merged = planned(plan_rename(TIME_OLD, TIME_NEW, [], {"time_get_current_time": DENIED, "now": DENIED}))
    assert merged.changes == ("tools.state.json: 'time_get_current_time' merged into the equal entry 'now'",)
    stale = planned(plan_rename(TIME_OLD, TIME_NEW, [], {"now": DENIED}))
    assert stale.state_doc == {"now": DENIED}
    assert stale.notices[0].startswith("tools.state.json: the entry 'now'")


def test_every_problem_is_reported_and_nothing_is_mutated() -> None:
    rows = [hook("time_.*"), hook("time_get_current_time", hook_id="exact"), hook("(", hook_id="broken")]
    state = {"time_get_current_time": DENIED, "now": HOT}
    rows_before, state_before = copy.deepcopy(rows), copy.deepcopy(state)
    reasons = refused(plan_rename(TIME_OLD, TIME_NEW, rows, state)).reasons
    assert [r.split(":")[0] for r in reasons] == [
        "hook 'guard' (PreToolUse, matcher 'time_.*')", "hook 'broken' (PreToolUse, matcher '(')",
        "tools.state.json"]
    assert rows == rows_before and state == state_before
    plan = planned(plan_rename(TIME_OLD, TIME_NEW, rows[1:2], {"time_get_current_time": DENIED}))
    assert plan.manifest_rows == [{**rows[1], "matcher": "now"}] and rows == rows_before


def test_no_rename_changes_nothing() -> None:
    rows, state = [hook("time_.*")], {"time_get_current_time": DENIED}
    plan = planned(plan_rename(TIME_OLD, TIME_OLD, rows, state))
    assert (plan.manifest_rows, plan.state_doc, plan.changes, plan.notices) == (rows, state, (), ())


@pytest.mark.parametrize(("name", "pattern"), [
    ("now", "now"), ("a-b_c", "a-b_c"), ("fs.read", r"fs\.read"), ("a+b", r"a\+b"), ("x.y-z", r"x\.y\-z"),
])
def test_readable_pattern(name: str, pattern: str) -> None:
    assert readable_pattern(name) == pattern


def expose(*entries: dict[str, Any], upstreams: tuple[str, ...] = ("time",)) -> dict[str, Any]:
    return {"version": 1, "upstreams": [{"id": u, "command": u} for u in upstreams], "expose": list(entries)}


def entry(as_name: str | None = None, tool: str = "get_current_time", **fields: Any) -> dict[str, Any]:
    """An expose entry of the `time` upstream (`as` and other fields only when given)."""
    row: dict[str, Any] = {"upstream": "time", "tool": tool, **fields}
    if as_name is not None:
        row["as"] = as_name
    return row


def rename(old: str, new: str, tool: str = "get_current_time", upstream: str = "time") -> Rename:
    return Rename(ToolNames(old, tool, tool, upstream), ToolNames(new, tool, tool, upstream))


DEFAULT = "time_get_current_time"


@pytest.mark.parametrize(("before", "after", "expected"), [
    pytest.param(expose(entry("now", enabled=False)),
                 expose(entry("now", enabled=True)), [rename(DEFAULT, "now")],
                 id="toggle-on-with-as"),
    pytest.param(expose(entry("now")), expose(entry("now", enabled=False)),
                 [rename("now", DEFAULT)], id="toggle-off"),
    pytest.param(expose(entry("now")), expose(entry("clock")),
                 [rename("now", "clock")], id="as-edited"),
    pytest.param(expose(entry("now")), expose(entry()), [rename("now", DEFAULT)], id="as-removed"),
    pytest.param(expose(), expose(entry("now")), [rename(DEFAULT, "now")], id="entry-added"),
    pytest.param(expose(entry("now")), expose(), [rename("now", DEFAULT)], id="entry-removed"),
    pytest.param(expose(entry("now")), expose(entry("now", category="clock")), [],
                 id="category-edit"),
    pytest.param(expose(entry("now", enabled=False)),
                 expose(entry("clock", enabled=False)), [], id="disabled-as-edit"),
    pytest.param(expose(), expose(entry("")), [], id="empty-as-is-the-default"),
    pytest.param(expose(entry("now")), expose(entry("now")), [], id="unchanged"),
    pytest.param(expose(entry("hash")), expose(entry("clock")), [],
                 id="was-shadowed-by-a-local-tool"),
    pytest.param(expose(entry("now")), expose(upstreams=()), [], id="upstream-removed"),
    pytest.param(expose(entry("now"), entry("bee", "b")),
                 expose(entry("clock"), entry("bee", "b")),
                 [rename("now", "clock")], id="only-the-edited-entry"),
])
def test_expose_renames(before: dict[str, Any], after: dict[str, Any], expected: list[Rename]) -> None:
    """An upstream tool's surfaced name follows from config alone: the enabled entry's `as`, else
    `<upstream>_<tool>`; every change an edit causes is one rename."""
    assert expose_renames(before, after, {"hash", "Hash it"}) == expected


@pytest.mark.parametrize(("after", "reason"), [
    pytest.param(expose(entry("hash")), "the new name 'hash' is a local or meta tool's name",
                 id="local-id"),
    pytest.param(expose(entry("toolfunnel_run_tool")), "is a local or meta tool's name", id="meta"),
    pytest.param(expose(entry("time_b"), entry("bee", "b", enabled=False)),
                 "the new name 'time_b' is also the name of 'time''s tool 'b'", id="another-entry's-tool"),
])
def test_expose_renames_refuses_a_taken_name(after: dict[str, Any], reason: str) -> None:
    before = expose(entry("now"), *after["expose"][1:])
    reasons = refused(expose_renames(before, after, {"hash"})).reasons
    assert len(reasons) == 1 and reason in reasons[0]


def test_expose_renames_uses_known_titles() -> None:
    titles = {("time", "get_current_time"): "Now"}
    titled = expose_renames(expose(), expose(entry("now")), (), titles)
    old = ToolNames(DEFAULT, "get_current_time", "Now", "time")
    new = ToolNames("now", "get_current_time", "Now", "time")
    assert titled == [Rename(old, new)]


def test_an_expose_toggle_end_to_end() -> None:
    """Enabling an expose entry with an `as`: the deny hook and the disabled switch follow the tool."""
    renames = expose_renames(expose(entry("now", enabled=False)),
                             expose(entry("now")), ())
    assert isinstance(renames, list)
    rows = [hook(DEFAULT), hook("mcp__time__.*", hook_id="cc"), hook("*", hook_id="all")]
    plan = planned(plan_renames(renames, rows, {DEFAULT: DENIED}))
    assert plan.manifest_rows == [{**rows[0], "matcher": "now"}, rows[1], rows[2]]
    assert plan.state_doc == {"now": DENIED}
    assert len(plan.changes) == 2
