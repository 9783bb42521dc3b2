"""The pure hook decision module: reading one hook's run, and combining one event's verdicts."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from tfunnel.gate.decision import Combined, HookEvent, HookRun, HookVerdict, combine, interpret

H = "h1"


def run(stdout: str = "", exit_code: int | None = 0, stderr: str = "", **flags: Any) -> HookRun:
    return HookRun(hook_id=H, exit_code=exit_code, stdout=stdout, stderr=stderr, **flags)


def pre(**specific: Any) -> str:
    """A Claude Code PreToolUse JSON answer with these `hookSpecificOutput` fields."""
    return json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", **specific}})


def deny(reason: str) -> HookVerdict:
    return HookVerdict(H, "deny", reason)


ALLOW_JSON = pre(permissionDecision="allow")
DENY_JSON = pre(permissionDecision="deny", permissionDecisionReason="no rm -rf")
UNREADABLE = deny(f"hook {H}: unreadable decision; denied")


@pytest.mark.parametrize(("event", "hook_run", "expected"), [
    pytest.param("PreToolUse", run(exit_code=2, stderr="  rm is not allowed\n"), deny("rm is not allowed"),
                 id="reason-is-stderr-stripped"),
    pytest.param("PreToolUse", run(exit_code=2), deny(f"blocked by hook {H}"), id="no-stderr"),
    pytest.param("PreToolUse", run(exit_code=2, stderr=" \n\t"), deny(f"blocked by hook {H}"),
                 id="blank-stderr"),
    pytest.param("PreToolUse", run(ALLOW_JSON, exit_code=2, stderr="nope"), deny("nope"),
                 id="ignores-a-json-allow"),
    pytest.param("Stop", run(exit_code=2, stderr="keep going"), deny("keep going"), id="other-event-blocks"),
    pytest.param("PreToolUse", run(exit_code=2, stderr="x", fail_closed=True), deny("x"),
                 id="fail-closed-same"),
])
def test_exit_two_blocks(event: HookEvent, hook_run: HookRun, expected: HookVerdict) -> None:
    """Exit 2 is a deny whose reason is stderr; stdout is ignored, on every event."""
    assert interpret(event, hook_run) == expected


@pytest.mark.parametrize("hook_run", [
    pytest.param(run(ALLOW_JSON, over_cap=True), id="exit-0-json-allow"),
    pytest.param(run("", over_cap=True), id="exit-0-no-output"),
    pytest.param(run(exit_code=2, stderr="why", over_cap=True), id="exit-2"),
    pytest.param(run(exit_code=1, over_cap=True), id="crash"),
])
def test_output_over_the_cap_denies(hook_run: HookRun) -> None:
    """Output over the cap denies whatever else happened: the decision may be in the cut-off part."""
    assert interpret("PreToolUse", hook_run) == deny(f"hook {H}: output over the cap; denied")


NOT_ANSWERED = [
    pytest.param(run(exit_code=1, stderr="Traceback ...\nKeyError: 'x'\n"),
                 "exited with status 1: Traceback ...\nKeyError: 'x'", id="crash"),
    pytest.param(run(exit_code=3), "exited with status 3", id="crash-no-stderr"),
    pytest.param(run(exit_code=1, stderr="a" * 600 + "END"), "exited with status 1: " + "a" * 497 + "END",
                 id="stderr-tail-500"),
    pytest.param(run(ALLOW_JSON, exit_code=1), "exited with status 1", id="crash-ignores-json"),
    pytest.param(run(exit_code=-9), "was killed by signal 9", id="killed"),
    pytest.param(run(exit_code=None, timed_out=True), "timed out", id="timeout"),
    pytest.param(run(ALLOW_JSON, exit_code=0, timed_out=True), "timed out", id="timeout-despite-output"),
    pytest.param(run(exit_code=None), "did not finish", id="no-exit-code"),
    pytest.param(run(exit_code=None, start_error="no such file: hooks/scripts/x.sh"),
                 "could not start: no such file: hooks/scripts/x.sh", id="start-error"),
]


@pytest.mark.parametrize(("hook_run", "what"), NOT_ANSWERED)
def test_a_hook_that_did_not_answer_is_a_non_blocking_error(hook_run: HookRun, what: str) -> None:
    """Crash, timeout, missing script: no decision, and an error naming the hook and what happened."""
    assert interpret("PreToolUse", hook_run) == HookVerdict(H, "none", error=f"hook {H}: {what}")


@pytest.mark.parametrize(("hook_run", "what"), NOT_ANSWERED)
def test_fail_closed_turns_not_answering_into_a_deny(hook_run: HookRun, what: str) -> None:
    """With failClosed the same failures deny, with the failure as the reason and no error."""
    closed = dataclasses.replace(hook_run, fail_closed=True)
    assert interpret("PreToolUse", closed) == deny(f"hook {H}: {what}")


@pytest.mark.parametrize(("stdout", "expected"), [
    pytest.param(DENY_JSON, deny("no rm -rf"), id="deny-with-reason"),
    pytest.param(pre(permissionDecision="deny"), deny(f"blocked by hook {H}"), id="deny-default-reason"),
    pytest.param(ALLOW_JSON, HookVerdict(H, "allow"), id="allow"),
    pytest.param(pre(permissionDecision="allow", permissionDecisionReason="safe"),
                 HookVerdict(H, "allow", "safe"),
                 id="allow-with-reason"),
    pytest.param(pre(permissionDecision="ask", permissionDecisionReason="sure?"),
                 HookVerdict(H, "ask", "sure?"),
                 id="ask-with-reason"),
    pytest.param(pre(permissionDecision="ask"), HookVerdict(H, "ask", f"hook {H} asks for confirmation"),
                 id="ask-default-reason"),
    pytest.param(pre(permissionDecision="allow", updatedInput={"path": "/tmp/x"}, additionalContext="ctx"),
                 HookVerdict(H, "allow", updated_input={"path": "/tmp/x"}, additional_context="ctx"),
                 id="allow-with-rewrite-and-context"),
    pytest.param(pre(updatedInput={"a": 2}), HookVerdict(H, "none", updated_input={"a": 2}),
                 id="rewrite-without-decision"),
    pytest.param(pre(permissionDecision="deny", updatedInput={"a": 2}, additionalContext="c"),
                 HookVerdict(H, "deny", f"blocked by hook {H}", additional_context="c"),
                 id="deny-drops-the-rewrite"),
    pytest.param("checking the call...\n" + DENY_JSON, deny("no rm -rf"), id="text-before-still-denies"),
    pytest.param(DENY_JSON + "\ndone, bye", deny("no rm -rf"), id="text-after-still-denies"),
    pytest.param("a {stray} brace, then " + DENY_JSON, deny("no rm -rf"), id="stray-brace-before"),
    pytest.param(DENY_JSON + "\n" + DENY_JSON, deny("no rm -rf"), id="same-decision-twice"),
    pytest.param(pre(additionalContext="one") + pre(additionalContext="two"),
                 HookVerdict(H, "none", additional_context="one\ntwo"), id="contexts-of-two-objects"),
    pytest.param(json.dumps({"decision": "approve", "reason": "fine"}), HookVerdict(H, "allow", "fine"),
                 id="legacy-approve"),
    pytest.param(json.dumps({"decision": "block", "reason": "bad"}), deny("bad"), id="legacy-block"),
    pytest.param(json.dumps({"decision": "block"}), deny(f"blocked by hook {H}"),
                 id="legacy-block-no-reason"),
    pytest.param(json.dumps({"hookSpecificOutput": {"permissionDecision": "allow"}, "decision": "approve"}),
                 HookVerdict(H, "allow"), id="both-forms-agree"),
    pytest.param(json.dumps({"continue": False, "stopReason": "halt"}), deny("halt"), id="continue-false"),
    pytest.param(json.dumps({"continue": False}), deny(f"hook {H} stopped the call"),
                 id="continue-false-default-reason"),
    pytest.param(json.dumps({"continue": True}), HookVerdict(H, "none"), id="continue-true-no-opinion"),
    pytest.param(json.dumps({"suppressOutput": True, "systemMessage": "hi"}), HookVerdict(H, "none"),
                 id="object-without-decision-keys"),
    pytest.param('[{"hookSpecificOutput": {"permissionDecision": "ask"}}]',
                 HookVerdict(H, "ask", f"hook {H} asks for confirmation"), id="object-inside-an-array"),
])
def test_pretooluse_json_decisions(stdout: str, expected: HookVerdict) -> None:
    """Exit 0 reads Claude Code's JSON (modern and legacy forms) wherever it sits in stdout."""
    assert interpret("PreToolUse", run(stdout)) == expected


@pytest.mark.parametrize("stdout", [
    pytest.param("", id="empty"),
    pytest.param("all good\n", id="plain-text"),
    pytest.param("set {x} and {y: 1} done", id="braces-without-keywords"),
    pytest.param("no decision here, continue as usual", id="bare-words-are-prose"),
    pytest.param('{"note": "hi"', id="broken-json-without-keywords"),
])
def test_output_without_a_decision_is_no_opinion(stdout: str) -> None:
    """Plain text, or JSON-ish text with no decision keyword, expresses no decision."""
    assert interpret("PreToolUse", run(stdout)) == HookVerdict(H, "none")


@pytest.mark.parametrize(("stdout", "expected"), [
    pytest.param(DENY_JSON[:-1], UNREADABLE, id="truncated-deny"),
    pytest.param(ALLOW_JSON[:-2], UNREADABLE, id="truncated-allow"),
    pytest.param('{"permissionDecision": deny}', UNREADABLE, id="unquoted-value"),
    pytest.param('permissionDecision: "deny"', UNREADABLE, id="keyword-in-plain-text"),
    pytest.param('{"decision": "block", reason: x}', UNREADABLE, id="broken-legacy"),
    pytest.param('{"continue": false,}', UNREADABLE, id="trailing-comma"),
    pytest.param(ALLOW_JSON + ' {"hookSpecificOutput": {"permissionDecision": "de', UNREADABLE,
                 id="second-object-truncated"),
    pytest.param('{"note": "x {"hookSpecificOutput": {"permissionDecision": "allow"}}', UNREADABLE,
                 id="decision-inside-a-broken-object"),
    pytest.param("[" * 100_000, HookVerdict(H, "none"), id="deep-array-is-no-object"),
    pytest.param('{"a":' * 100_000, deny(f"hook {H}: unreadable decision (nested too deeply); denied"),
                 id="nested-too-deeply"),
    pytest.param(pre(permissionDecision="maybe"),
                 deny(f"hook {H}: unreadable decision (permissionDecision 'maybe'); denied"), id="maybe"),
    pytest.param(pre(permissionDecision=True),
                 deny(f"hook {H}: unreadable decision (permissionDecision True); denied"), id="non-string"),
    pytest.param(pre(permissionDecision="deny", permissionDecisionReason=7),
                 deny(f"hook {H}: unreadable decision (permissionDecisionReason is not a string); denied"),
                 id="reason-not-a-string"),
    pytest.param(json.dumps({"hookSpecificOutput": "allow"}),
                 deny(f"hook {H}: unreadable decision (hookSpecificOutput is not an object); denied"),
                 id="hook-specific-output-not-an-object"),
    pytest.param(pre(permissionDecision="allow", updatedInput=["a"]),
                 deny(f"hook {H}: unreadable decision (updatedInput is not an object); denied"),
                 id="updated-input-not-an-object"),
    pytest.param(pre(permissionDecision="allow", additionalContext={"x": 1}),
                 deny(f"hook {H}: unreadable decision (additionalContext is not a string); denied"),
                 id="context-not-a-string"),
    pytest.param(json.dumps({"decision": "allow"}),
                 deny(f"hook {H}: unreadable decision (decision 'allow'); denied"),
                 id="legacy-unknown-value"),
    pytest.param(json.dumps({"continue": "no"}),
                 deny(f"hook {H}: unreadable decision (continue 'no'); denied"), id="continue-not-a-bool"),
    pytest.param(json.dumps({"continue": False, "stopReason": 1}),
                 deny(f"hook {H}: unreadable decision (stopReason is not a string); denied"),
                 id="stop-reason-not-a-string"),
    pytest.param(DENY_JSON + pre(permissionDecision="maybe"),
                 deny(f"hook {H}: unreadable decision (permissionDecision 'maybe'); denied"),
                 id="one-bad-object-spoils-the-output"),
])
def test_an_unreadable_decision_is_a_deny(stdout: str, expected: HookVerdict) -> None:
    """Output that tried to decide but cannot be read (truncated, wrong shape, unknown value) denies."""
    assert interpret("PreToolUse", run(stdout)) == expected


def dup(key: str) -> HookVerdict:
    return deny(f"hook {H}: unreadable decision (duplicate key {key!r}); denied")


@pytest.mark.parametrize(("event", "stdout", "expected"), [
    pytest.param("PreToolUse", '{"hookSpecificOutput": {"permissionDecision": "allow", '
                               '"permissionDecision": "deny"}}', dup("permissionDecision"),
                 id="permission-decision-twice"),
    pytest.param("PreToolUse", '{"hookSpecificOutput": {"permissionDecision": "allow", '
                               '"permissionDecision": "allow"}}', dup("permissionDecision"),
                 id="same-value-twice-still-denies"),
    pytest.param("PreToolUse", '{"hookSpecificOutput": {"permissionDecision": "deny"}, '
                               '"hookSpecificOutput": {"permissionDecision": "allow"}}',
                 dup("hookSpecificOutput"), id="two-hook-specific-outputs"),
    pytest.param("PreToolUse", '{"decision": "block", "decision": "approve"}', dup("decision"),
                 id="legacy-decision-twice"),
    pytest.param("PreToolUse", '{"continue": false, "continue": true}', dup("continue"), id="continue-twice"),
    pytest.param("PreToolUse", '{"hookSpecificOutput": {"permissionDecision": "allow", "updatedInput": '
                               '{"path": "/tmp/x", "path": "/etc/passwd"}}}', dup("path"),
                 id="inside-updated-input"),
    pytest.param("PreToolUse", '{"hookSpecificOutput": {"permissionDecision": "deny", '
                               '"permission\\u0044ecision": "allow"}}', dup("permissionDecision"),
                 id="same-key-spelled-with-an-escape"),
    pytest.param("PreToolUse", '{"hookSpecificOutput": {"permissionDecision": "allow", '
                               '"permissionDecisionReason": "a", "permissionDecisionReason": "b"}}',
                 dup("permissionDecisionReason"), id="reason-twice"),
    pytest.param("PreToolUse", '{"log": "checking", "log": "done"}\n' + ALLOW_JSON, dup("log"),
                 id="unrelated-key-of-a-non-deciding-object"),
    pytest.param("PreToolUse", '{"hookSpecificOutput": {"permissionDecision": "allow", '
                               '"extra": {"x": [{"k": 1, "k": 1}]}}}', dup("k"),
                 id="deep-in-an-unread-field"),
    pytest.param("PreToolUse", ALLOW_JSON + '\n{"decision": "approve", "decision": "approve"}',
                 dup("decision"), id="in-a-later-object"),
    pytest.param("PreToolUse", '[{"decision": "approve", "decision": "approve"}]', dup("decision"),
                 id="object-inside-an-array"),
    pytest.param("PreToolUse", '{"note": "x {"decision": "approve", "decision": "approve"}', dup("decision"),
                 id="inside-a-broken-object"),
    pytest.param("PreToolUse", '{"": 1, "": 2}', dup(""), id="empty-key"),
    pytest.param("PreToolUse", json.dumps({"k" * 100: 1})[:-1] + ', "' + "k" * 100 + '": 2}', dup("k" * 40),
                 id="long-key-cut-in-the-reason"),
    pytest.param("PostToolUse", '{"decision": "block", "reason": "a", "reason": "b"}', dup("reason"),
                 id="post-tool-use"),
    pytest.param("SessionStart",
                 '{"hookSpecificOutput": {"additionalContext": "a", "additionalContext": "b"}}',
                 dup("additionalContext"), id="session-start-context-dropped"),
])
def test_a_repeated_key_is_an_unreadable_decision(event: HookEvent, stdout: str,
                                                  expected: HookVerdict) -> None:
    """A key repeated in any decoded object, at any depth and even with equal values, denies."""
    assert interpret(event, run(stdout)) == expected


@pytest.mark.parametrize(("stdout", "expected"), [
    pytest.param(DENY_JSON + DENY_JSON, deny("no rm -rf"), id="same-object-twice"),
    pytest.param(pre(permissionDecision="allow", updatedInput={"permissionDecision": "deny"}),
                 HookVerdict(H, "allow", updated_input={"permissionDecision": "deny"}), id="same-key-nested"),
    pytest.param('{"a": {"a": {"a": 1}}}' + DENY_JSON, deny("no rm -rf"), id="same-key-at-each-depth"),
])
def test_the_same_key_in_different_objects_is_not_a_repeat(stdout: str, expected: HookVerdict) -> None:
    """Only a key repeated within one object counts: separate objects and nested levels may share keys."""
    assert interpret("PreToolUse", run(stdout)) == expected


CAP = 256 * 1024  # the runner's hook output cap


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("stdout", "decision"), [
    pytest.param("{" * CAP, "none", id="stray-braces"),
    pytest.param('{"' * (CAP // 2), "none", id="brace-quote-pairs"),
    pytest.param(('{"a" ' * CAP)[:CAP - 100] + DENY_JSON, "deny", id="broken-objects-then-deny"),
    pytest.param(('{"a" ' * CAP)[:CAP - 100] + ALLOW_JSON[:-1], "deny", id="broken-objects-then-truncated"),
    pytest.param("x" * 2000 + '{"note": "x {' + ALLOW_JSON[:-1], "deny", id="broken-wrapper-far-in"),
    pytest.param(('{"k": "' + "x" * 850 + '", "n": ') * 300, "none", id="deep-broken-nesting"),
    pytest.param("{}" * (CAP // 2), "none", id="many-empty-objects"),
    pytest.param(('{"a": [' + '{"b": 1}, ' * CAP)[:CAP], "none", id="unclosed-array-of-objects"),
    pytest.param("{" + ", ".join(f'"k{i}": 1' for i in range(CAP // 14)) + ', "k0": 1}', "deny",
                 id="wide-object-repeating-its-first-key-last"),
])
def test_a_pathological_output_at_the_cap_is_read_quickly(stdout: str, decision: str) -> None:
    """Output at the cap full of braces or broken objects is read correctly, without quadratic time."""
    assert interpret("PreToolUse", run(stdout)).decision == decision


@pytest.mark.parametrize(("stdout", "first", "second"), [
    pytest.param(ALLOW_JSON + "\n" + DENY_JSON, "allow", "deny", id="allow-then-deny"),
    pytest.param(DENY_JSON + "\n" + ALLOW_JSON, "deny", "allow", id="deny-then-allow"),
    pytest.param(pre(permissionDecision="ask") + pre(permissionDecision="allow"), "ask", "allow",
                 id="ask-then-allow"),
    pytest.param(json.dumps({"hookSpecificOutput": {"permissionDecision": "allow"}, "decision": "block"}),
                 "allow", "deny", id="two-fields-in-one-object"),
    pytest.param(json.dumps({"decision": "approve", "continue": False}), "allow", "deny",
                 id="approve-but-stop"),
])
def test_two_different_decisions_deny(stdout: str, first: str, second: str) -> None:
    """Two different decisions in one output (objects or fields) are a conflict, and deny."""
    expected = deny(f"hook {H}: conflicting decisions ({first}, {second}); denied")
    assert interpret("PreToolUse", run(stdout)) == expected


@pytest.mark.parametrize(("stdout", "expected"), [
    pytest.param(pre(permissionDecision="allow", updatedInput={"a": 1})
                 + pre(permissionDecision="allow", updatedInput={"a": 2}),
                 deny(f"hook {H}: conflicting updatedInput; denied"), id="different"),
    pytest.param(pre(updatedInput={"a": 1}) + pre(permissionDecision="allow", updatedInput={"a": 1}),
                 HookVerdict(H, "allow", updated_input={"a": 1}), id="same-twice"),
])
def test_updated_input_within_one_output(stdout: str, expected: HookVerdict) -> None:
    """Two objects of one output must agree on updatedInput, or the hook denies."""
    assert interpret("PreToolUse", run(stdout)) == expected


@pytest.mark.parametrize(("event", "stdout", "expected"), [
    pytest.param("PostToolUse", json.dumps({"decision": "block", "reason": "leaked a secret"}),
                 deny("leaked a secret"), id="post-block"),
    pytest.param("Stop", json.dumps({"decision": "block"}), deny(f"blocked by hook {H}"), id="stop-block"),
    pytest.param("Stop", json.dumps({"continue": False, "stopReason": "enough"}), deny("enough"),
                 id="continue-false"),
    pytest.param("SessionStart", json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart",
                                                                    "additionalContext": "Repo rules: ..."}}),
                 HookVerdict(H, "none", additional_context="Repo rules: ..."), id="session-start-context"),
    pytest.param("SessionStart", "just text", HookVerdict(H, "none"), id="plain-text"),
    pytest.param("PostToolUse", pre(permissionDecision="deny", updatedInput={"a": 1}), HookVerdict(H, "none"),
                 id="permission-decision-ignored"),
    pytest.param("PostToolUse", pre(permissionDecision="maybe"), HookVerdict(H, "none"),
                 id="permission-decision-ignored-even-if-bad"),
    pytest.param("Stop", json.dumps({"decision": "stop"}),
                 deny(f"hook {H}: unreadable decision (decision 'stop'); denied"), id="unknown-decision"),
    pytest.param("SessionStart", json.dumps({"hookSpecificOutput": {"additionalContext": 3}}),
                 deny(f"hook {H}: unreadable decision (additionalContext is not a string); denied"),
                 id="context-not-a-string"),
    pytest.param("Stop", '{"decision": "block"', UNREADABLE, id="truncated"),
])
def test_other_events(event: HookEvent, stdout: str, expected: HookVerdict) -> None:
    """Outside PreToolUse: top-level block and continue:false deny, additionalContext is carried."""
    assert interpret(event, run(stdout)) == expected


def v(hook: str, decision: Any = "allow", reason: str = "", updated: dict[str, Any] | None = None,
      context: str = "", error: str | None = None) -> HookVerdict:
    return HookVerdict(hook, decision, reason, updated, context, error)


@pytest.mark.parametrize(("verdicts", "expected"), [
    pytest.param([], Combined("allow"), id="no-hooks"),
    pytest.param([v("a"), v("b")], Combined("allow"), id="all-allow"),
    pytest.param([v("a", "none"), v("b", "none")], Combined("allow"), id="none-counts-as-allow"),
    pytest.param([v("a", "allow"), v("b", "deny", "no"), v("c", "ask", "?")], Combined("deny", "no", "b"),
                 id="deny-beats-ask-and-allow"),
    pytest.param([v("a", "ask", "?"), v("b", "none")], Combined("ask", "?", "a"), id="ask-beats-none"),
    pytest.param([v("a", "allow"), v("b", "ask", "sure?")], Combined("ask", "sure?", "b"),
                 id="ask-beats-allow"),
    pytest.param([v("a", "ask", "first?"), v("b", "ask", "second?")], Combined("ask", "first?", "a"),
                 id="first-ask-wins"),
    pytest.param([v("a", "ask", "?"), v("b", "deny", "one"), v("c", "deny", "two")],
                 Combined("deny", "one", "b"), id="first-deny-wins"),
    pytest.param([v("a", "deny")], Combined("deny", "blocked by hook a", "a"), id="deny-default-reason"),
    pytest.param([v("a", "ask")], Combined("ask", "hook a asks for confirmation", "a"),
                 id="ask-default-reason"),
])
def test_combine_precedence(verdicts: list[HookVerdict], expected: Combined) -> None:
    """deny > ask > allow >= none; the first deny (else first ask) gives reason and hook id."""
    assert combine(verdicts) == expected


@pytest.mark.parametrize(("verdicts", "expected"), [
    pytest.param([v("a", updated={"x": 1}), v("b")], Combined("allow", updated_input={"x": 1}),
                 id="one-rewrite"),
    pytest.param([v("a", "none", updated={"x": 1})], Combined("allow", updated_input={"x": 1}),
                 id="rewrite-from-no-opinion"),
    pytest.param([v("a", updated={"x": 1}), v("b", "none", updated={"x": 1})],
                 Combined("allow", updated_input={"x": 1}), id="two-agree"),
    pytest.param([v("a", updated={"x": 1}), v("b"), v("c", updated={"x": 2})],
                 Combined("deny", "conflicting updatedInput from hooks a and c; denied"), id="two-differ"),
    pytest.param([v("a", updated={"x": 1}), v("b", "ask", "?"), v("c", updated={"x": 2})],
                 Combined("deny", "conflicting updatedInput from hooks a and c; denied"),
                 id="conflict-beats-ask"),
    pytest.param([v("a", updated={"x": 1}), v("b", "deny", "no")], Combined("deny", "no", "b"),
                 id="deny-drops-the-rewrite"),
    pytest.param([v("a", updated={"x": 1}), v("b", "ask", "?")], Combined("ask", "?", "b", {"x": 1}),
                 id="ask-keeps-the-rewrite"),
    pytest.param([v("a", "ask", "?", updated={"x": 1}), v("b", updated={"x": 2})],
                 Combined("deny", "conflicting updatedInput from hooks a and b; denied"),
                 id="ask-rewrite-conflicts-too"),
])
def test_combine_updated_input(verdicts: list[HookVerdict], expected: Combined) -> None:
    """One distinct rewrite among allowing verdicts applies; two different ones deny."""
    assert combine(verdicts) == expected


@pytest.mark.parametrize("outcome", ["allow", "ask", "deny"])
def test_combine_keeps_contexts_and_errors_in_manifest_order(outcome: str) -> None:
    """Every hook's additionalContext (joined by newlines) and every error survive any outcome."""
    verdicts = [v("a", context="first", error="hook a: timed out"), v("b", "none", error="hook b: crashed"),
                v("c", outcome, "r", context="second"), v("d", context="")]
    combined = combine(verdicts)
    assert combined.decision == outcome
    assert combined.additional_context == "first\nsecond"
    assert combined.errors == ("hook a: timed out", "hook b: crashed")


def test_interpret_then_combine_end_to_end() -> None:
    """A crash, a context and a JSON deny behind log text combine into the hook's deny, nothing lost."""
    verdicts = [interpret("PreToolUse", HookRun("crashy", 1, "", "boom")),
                interpret("PreToolUse", HookRun("ctx", 0, pre(additionalContext="be careful"), "")),
                interpret("PreToolUse", HookRun("guard", 0, "scanning\n" + DENY_JSON + "\n", ""))]
    assert combine(verdicts) == Combined("deny", "no rm -rf", "guard", additional_context="be careful",
                                         errors=("hook crashy: exited with status 1: boom",))
