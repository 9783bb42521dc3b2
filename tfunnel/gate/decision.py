"""Read what one hook process did as a decision, and combine the decisions of one event's hooks.

Pure: no I/O, no clock, no trio. The safety case is "an unreadable decision is a deny": output over
the cap, output that tried to decide but cannot be read, two different decisions in one output, or
a repeated key in any JSON object of the output all deny. A hook that never answered is a
non-blocking error, unless its entry says failClosed.
`interpret` and `combine` never raise on any `HookRun` or verdict list; if they do, that is a bug
(and the engine's caller denies, flagged internal).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

HookEvent = Literal["SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "PreCompact"]
Decision = Literal["allow", "deny", "ask", "none"]  # none: the hook expressed no decision

# Text showing that a hook tried to decide. Found in output that did not decode, it makes the
# decision unreadable. The short words are quoted so that prose ("no decision yet") is not caught.
_KEYWORDS = ("permissionDecision", '"decision"', '"continue"')
_PERMISSION: dict[str, Decision] = {"allow": "allow", "deny": "deny", "ask": "ask"}
# The older Claude Code top-level form, still written by existing hooks.
_LEGACY: dict[str, Decision] = {"approve": "allow", "block": "deny"}
# Where a JSON object can begin. Any other "{" cannot decode, so skipping it changes nothing, and
# keeps `"{" * 256K` (plain text) from costing one failed decode per brace.
_OBJECT_START = re.compile(r'\{[ \t\n\r]*["}]')
# A failed decode computes its line number by counting from the start of the document: O(position).
# Decoding in a copy that starts at most this far before the "{" keeps each failure cheap (the
# copies cost O(n²/_WINDOW) in all); without it a 256 KiB output of broken objects took seconds.
_WINDOW = 512
# Keys quoted in a reason are cut here: a hostile hook must not fill the log through our message.
_KEY_SHOWN = 40
# Enough of a crashing hook's stderr to see the traceback's last lines, not enough to flood a log.
_STDERR_TAIL = 500


@dataclass(frozen=True)
class HookRun:
    """What the runner observed for one hook: its process, or an http hook's request (see `gate.http`)."""

    hook_id: str
    exit_code: int | None  # None: it did not finish (timed out, killed, or could not start)
    stdout: str  # decoded (utf-8, errors="replace"), possibly truncated at the cap
    stderr: str
    over_cap: bool = False  # stdout or stderr exceeded the output cap
    timed_out: bool = False
    start_error: str | None = None  # could not start (missing script, not executable, ...)
    fail_closed: bool = False  # the manifest entry's failClosed
    # An http hook that gave no answer (an error status, a failed connection, a body that is not
    # a JSON object): said whole, like a process's failure. None for a command hook.
    no_answer: str | None = None


@dataclass(frozen=True)
class HookVerdict:
    """One hook's decision; `error` is a non-blocking failure to report and log."""

    hook_id: str
    decision: Decision
    reason: str = ""
    updated_input: Mapping[str, Any] | None = None
    additional_context: str = ""
    error: str | None = None


@dataclass(frozen=True)
class Combined:
    """The decision of all of one event's hooks; `hook_id` names the verdict that decided, if one did."""

    decision: Literal["allow", "deny", "ask"]
    reason: str = ""
    hook_id: str | None = None
    updated_input: Mapping[str, Any] | None = None
    additional_context: str = ""  # every hook's additionalContext, joined with "\n" in manifest order
    errors: tuple[str, ...] = ()  # the non-blocking errors, in manifest order


class _Unreadable(Exception):
    """The output tried to decide but cannot be read; `interpret` turns this into a deny."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook`: the object, unless a key repeats; raises `_Unreadable` if one does.

    A repeated key is two answers in one object: Python's json keeps the last, other parsers (and
    a proxy in between) may keep the first, so no reading of it is safe, even with equal values.
    """
    obj = dict(pairs)
    if len(obj) == len(pairs):  # the common case: one dict, one comparison
        return obj
    repeated = next(key for key, count in Counter(key for key, _ in pairs).items() if count > 1)
    raise _Unreadable(f"duplicate key {repeated[:_KEY_SHOWN]!r}")


# Stateless, so shared. The C scanner still does the parsing and calls the hook once as each object
# closes (inner ones first), so a repeated key anywhere in the output ends the read at once.
_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)


@dataclass
class _Reading:
    """What the JSON objects of one output said, in the order they said it."""

    claims: list[tuple[Decision, str]] = field(default_factory=list)
    updates: list[Mapping[str, Any]] = field(default_factory=list)
    contexts: list[str] = field(default_factory=list)


def interpret(event: HookEvent, run: HookRun) -> HookVerdict:
    """Turn one finished (or failed) hook run into its verdict, by the rules of SPEC §5."""
    hook = run.hook_id
    if run.over_cap:  # the decision may be in the part we cut off
        return HookVerdict(hook, "deny", f"hook {hook}: output over the cap; denied")
    if run.exit_code == 2:  # Claude Code ignores stdout on exit 2, and so do we
        return HookVerdict(hook, "deny", run.stderr.strip() or f"blocked by hook {hook}")
    failure = _did_not_answer(run)
    if failure is not None:
        text = f"hook {hook}: {failure}"
        if run.fail_closed:
            return HookVerdict(hook, "deny", text)
        return HookVerdict(hook, "none", error=text)
    try:
        return _read_output(event, hook, run.stdout)
    except _Unreadable as exc:
        detail = f" ({exc})" if str(exc) else ""
        return HookVerdict(hook, "deny", f"hook {hook}: unreadable decision{detail}; denied")


def tries_to_decide(text: str) -> bool:
    """Whether `text` shows a hook trying to decide (a decision's key in it): such text that is
    not a readable decision is an unreadable one, a deny."""
    return any(keyword in text for keyword in _KEYWORDS)


def combine(verdicts: Sequence[HookVerdict]) -> Combined:
    """Combine verdicts given in manifest order: deny > ask > allow, and `none` counts as allow.

    The first deny (else the first ask) gives the reason and hook id. Two different updatedInputs
    (from any non-denying hooks) deny: a rewrite nobody can predict must not run; the agreed one
    is kept through an ask. Contexts and errors are kept on every outcome.
    """
    context = "\n".join(v.additional_context for v in verdicts if v.additional_context)
    errors = tuple(v.error for v in verdicts if v.error is not None)
    deny = next((v for v in verdicts if v.decision == "deny"), None)
    if deny is not None:
        return Combined("deny", deny.reason or f"blocked by hook {deny.hook_id}", deny.hook_id,
                        additional_context=context, errors=errors)
    rewriter: HookVerdict | None = None
    for verdict in verdicts:
        if verdict.updated_input is None:
            continue
        if rewriter is None:
            rewriter = verdict
        elif verdict.updated_input != rewriter.updated_input:
            # Checked before ask: the conflict is a deny, and deny outranks ask.
            reason = f"conflicting updatedInput from hooks {rewriter.hook_id} and {verdict.hook_id}; denied"
            return Combined("deny", reason, additional_context=context, errors=errors)
    # A rewrite survives an ask: the user confirms the call that will actually run.
    updated = rewriter.updated_input if rewriter is not None else None
    ask = next((v for v in verdicts if v.decision == "ask"), None)
    if ask is not None:
        return Combined("ask", ask.reason or f"hook {ask.hook_id} asks for confirmation", ask.hook_id,
                        updated_input=updated, additional_context=context, errors=errors)
    return Combined("allow", updated_input=updated, additional_context=context, errors=errors)


def _did_not_answer(run: HookRun) -> str | None:
    """What went wrong if the hook gave no answer at all (exit 2 is handled before), else None."""
    if run.no_answer is not None:
        return run.no_answer
    if run.start_error is not None:
        return f"could not start: {run.start_error}"
    if run.timed_out:
        return "timed out"
    if run.exit_code is None:
        return "did not finish"
    if run.exit_code == 0:
        return None
    what = (f"was killed by signal {-run.exit_code}" if run.exit_code < 0
            else f"exited with status {run.exit_code}")
    tail = run.stderr.strip()[-_STDERR_TAIL:]
    return f"{what}: {tail}" if tail else what


def _read_output(event: HookEvent, hook: str, stdout: str) -> HookVerdict:
    """Exit 0: the verdict from the JSON objects in stdout; raises `_Unreadable`."""
    objects, undecoded = _scan(stdout)
    if tries_to_decide(undecoded):
        raise _Unreadable()
    reading = _Reading()
    for obj in objects:
        _read_object(event, hook, obj, reading)
    decisions = list(dict.fromkeys(decision for decision, _ in reading.claims))
    if len(decisions) > 1:
        return HookVerdict(hook, "deny", f"hook {hook}: conflicting decisions ({decisions[0]}, "
                                         f"{decisions[1]}); denied")
    if any(update != reading.updates[0] for update in reading.updates):
        return HookVerdict(hook, "deny", f"hook {hook}: conflicting updatedInput; denied")
    decision: Decision = decisions[0] if decisions else "none"
    reason = next((text for _, text in reading.claims if text), "")
    if not reason and decision == "deny":
        reason = f"blocked by hook {hook}"
    elif not reason and decision == "ask":
        reason = f"hook {hook} asks for confirmation"
    updated = reading.updates[0] if reading.updates and decision != "deny" else None
    return HookVerdict(hook, decision, reason, updated, "\n".join(reading.contexts))


def _scan(text: str) -> tuple[list[dict[str, Any]], str]:
    """Every JSON object in `text`, left to right, and the text that did not decode.

    At each "{" try to decode; a decoded object is taken whole and scanning resumes after it; a "{"
    that does not decode is skipped. The undecoded text also includes objects found inside a "{"
    that failed (before the point where it failed): they are fragments of a broken decision, as in
    `{"hookSpecificOutput": {"permissionDecision": "deny"}` with its last brace cut off.
    Raises `_Unreadable` if the nesting is too deep to decode, or if any object that decodes (at
    any depth, inside a broken "{" too) repeats a key.
    """
    objects: list[dict[str, Any]] = []
    pieces: list[str] = []
    done = 0  # text before this is either in `pieces` or inside a trusted object
    broken_until = -1  # the furthest point a failed "{" decoded to
    base, doc = 0, text  # doc == text[base:]; see _WINDOW
    found = _OBJECT_START.search(text)
    while found is not None:
        start = found.start()
        if start - base > _WINDOW:
            base, doc = start, text[start:]
        try:
            obj, end = _DECODER.raw_decode(doc, start - base)
        except json.JSONDecodeError as exc:
            broken_until = max(broken_until, base + exc.pos)
            found = _OBJECT_START.search(text, start + 1)
            continue
        except RecursionError as exc:  # nesting deeper than the decoder can follow
            raise _Unreadable("nested too deeply") from exc
        end += base
        objects.append(obj)  # decoding from a "{" can only produce a dict
        if start >= broken_until:
            pieces.append(text[done:start])
            done = end
        found = _OBJECT_START.search(text, end)
    pieces.append(text[done:])
    return objects, "\n".join(pieces)


def _read_object(event: HookEvent, hook: str, obj: Mapping[str, Any], out: _Reading) -> None:
    """Add what one JSON object says to `out`; raises `_Unreadable` on a field of the wrong shape."""
    specific = obj.get("hookSpecificOutput", {})
    if not isinstance(specific, dict):
        raise _Unreadable("hookSpecificOutput is not an object")
    context = _text(specific, "additionalContext")
    if context:
        out.contexts.append(context)
    if event == "PreToolUse":  # permissionDecision and updatedInput mean nothing elsewhere
        if "permissionDecision" in specific:
            value = specific["permissionDecision"]
            decision = _PERMISSION.get(value) if isinstance(value, str) else None
            if decision is None:
                raise _Unreadable(f"permissionDecision {value!r}")
            out.claims.append((decision, _text(specific, "permissionDecisionReason")))
        if "updatedInput" in specific:
            update = specific["updatedInput"]
            if not isinstance(update, dict):
                raise _Unreadable("updatedInput is not an object")
            out.updates.append(update)
    if "decision" in obj:
        value = obj["decision"]
        decision = _LEGACY.get(value) if isinstance(value, str) else None
        if decision is None:
            raise _Unreadable(f"decision {value!r}")
        out.claims.append((decision, _text(obj, "reason")))
    if "continue" in obj:
        go = obj["continue"]
        if not isinstance(go, bool):
            raise _Unreadable(f"continue {go!r}")
        if not go:
            out.claims.append(("deny", _text(obj, "stopReason") or f"hook {hook} stopped the call"))


def _text(obj: Mapping[str, Any], key: str) -> str:
    """An optional string field ("" when absent); raises `_Unreadable` if it is not a string."""
    value = obj.get(key, "")
    if not isinstance(value, str):
        raise _Unreadable(f"{key} is not a string")
    return value
