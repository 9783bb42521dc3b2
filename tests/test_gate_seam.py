"""The `gated_run` seam: a deny means the tool never ran, on every execution path."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import trio

from tfunnel.config.load import load_register, load_settings
from tfunnel.config.model import ToolState, Visibility
from tfunnel.errors import GateDenied
from tfunnel.gate.gated import NeedsInput, PreDecision, ToolCall, gated_run
from tfunnel.observe.audit import AuditLog
from tfunnel.protocol.results import ToolResult
from tfunnel.surface.catalog import Catalog
from tfunnel.surface.context import CallContext
from tfunnel.surface.service import Surface
from tfunnel.testing.fakes import NoUpstreams
from tfunnel.tools.runner import LocalRunner

pytestmark = pytest.mark.timeout(60)

CTX = CallContext(session_id="test", call_id="1")
CALL = ToolCall(surfaced="danger", tool_id="danger", display="Danger Demo", args={"a": 1})


class RecordingGate:
    """A gate double: a fixed PreToolUse decision (or failure), recording what it saw."""

    def __init__(self, decision: PreDecision | None = None, *, fail: bool = False,
                 block: bool = False) -> None:
        self.decision = decision or PreDecision(allow=True)
        self.fail = fail
        self.block = block
        self.pre: list[ToolCall] = []
        self.post: list[tuple[ToolCall, ToolResult]] = []

    async def pre_tool_use(self, call: ToolCall) -> PreDecision:
        self.pre.append(call)
        if self.block:
            await trio.sleep_forever()
        if self.fail:
            raise RuntimeError("engine exploded")
        return self.decision

    async def post_tool_use(self, call: ToolCall, result: ToolResult) -> None:
        self.post.append((call, result))


class Executions:
    def __init__(self) -> None:
        self.args: list[Mapping[str, Any]] = []

    async def __call__(self, args: Mapping[str, Any]) -> ToolResult:
        self.args.append(args)
        return ToolResult.text("ran")


@pytest.mark.parametrize(("gate", "internal"), [
    (RecordingGate(PreDecision(allow=False, reason="policy says no")), False),
    (RecordingGate(fail=True), True),
], ids=["deny", "gate-failure"])
async def test_deny_never_enters_execute(gate: RecordingGate, internal: bool) -> None:
    """A deny, or a failing gate, raises GateDenied and never calls execute or PostToolUse."""
    execute = Executions()
    with pytest.raises(GateDenied) as denied:
        await gated_run(gate, CALL, execute)
    assert execute.args == [] and gate.post == []
    assert denied.value.internal is internal


QUESTION = NeedsInput({"tfunnel/confirm-x": {"method": "elicitation/create", "params": {}}})


async def test_an_ask_waiting_for_input_is_returned_and_never_runs() -> None:
    """A decision that needs the user's input comes back from gated_run as that value: execute
    and PostToolUse never run."""
    gate = RecordingGate(PreDecision(allow=False, reason="waiting", needs_input=QUESTION))
    execute = Executions()
    assert await gated_run(gate, CALL, execute) is QUESTION
    assert execute.args == [] and gate.post == []


async def test_an_execution_waiting_for_input_skips_post() -> None:
    """An execution that ends with an upstream's question returns it; PostToolUse waits for the
    call's real end."""
    gate = RecordingGate(PreDecision(allow=True, additional_context="ctx"))

    async def asks(args: Mapping[str, Any]) -> NeedsInput:
        return QUESTION

    assert await gated_run(gate, CALL, asks) is QUESTION
    assert gate.post == []


async def test_allow_runs_with_updated_input_then_post() -> None:
    """An allow with updatedInput runs execute with the new arguments; PostToolUse sees what ran."""
    gate = RecordingGate(PreDecision(allow=True, updated_input={"a": 2}))
    execute = Executions()
    result = await gated_run(gate, CALL, execute)
    assert execute.args == [{"a": 2}]
    assert [(call.args, res) for call, res in gate.post] == [({"a": 2}, result)]


async def test_cancel_while_in_the_gate_is_not_a_decision() -> None:
    """Cancelling a call waiting on the gate propagates as a cancel; execute never runs."""
    gate = RecordingGate(block=True)
    execute = Executions()
    with trio.move_on_after(0.2) as scope:
        await gated_run(gate, CALL, execute)
    assert scope.cancelled_caught and execute.args == []


def surface_for(home: Path, gate: RecordingGate, state: ToolState, danger_log: Path) -> Surface:
    catalog = Catalog(load_register(home), state)
    runner = LocalRunner(home, load_settings(home).limits,
                         {**os.environ, "TOOLFUNNEL_DANGER_LOG": str(danger_log)})
    return Surface(lambda: catalog, lambda: gate, runner, NoUpstreams(), AuditLog(home))


def with_reference_tool(home: Path) -> None:
    path = home / "tools" / "tools.register.json"
    register = json.loads(path.read_text())
    register["tools"].append({"id": "deploy-notes", "name": "Deploy Notes", "mode": "reference",
                              "instructions": "SECRET-STEPS: run make deploy",
                              "invoke": {"type": "script", "path": "tools/scripts/danger.py"}})
    path.write_text(json.dumps(register))


PATHS = [
    ("run_tool", "toolfunnel_run_tool", {"name": "danger", "args": {"x": 1}}),
    ("run_tool-by-display-name", "toolfunnel_run_tool", {"name": "Danger Demo", "args": {}}),
    ("hot-direct", "danger", {"x": 1}),
]


@pytest.mark.parametrize(("path", "tool", "args"), PATHS, ids=[p[0] for p in PATHS])
async def test_deny_leaves_no_side_effect_on_every_path(
    home: Path, tmp_path: Path, path: str, tool: str, args: dict[str, Any]
) -> None:
    """Through the real surface and runner, a deny leaves the danger tool's log file absent."""
    danger_log = tmp_path / "danger.log"
    state = ToolState(entries={"danger": Visibility(hot=True)})
    denied = surface_for(home, RecordingGate(PreDecision(allow=False, reason="blocked: danger")),
                         state, danger_log)
    result = await denied.call(tool, args, CTX)
    assert isinstance(result, ToolResult)
    assert result.is_error and result.denied
    assert result.first_text() == "blocked: danger"
    assert not danger_log.exists()
    allowed = surface_for(home, RecordingGate(), state, danger_log)
    ran = await allowed.call(tool, args, CTX)
    assert isinstance(ran, ToolResult) and not ran.is_error
    assert danger_log.exists()  # the same call, allowed, does run: the check above can fail


@pytest.mark.parametrize(("tool", "args"), [
    ("toolfunnel_run_tool", {"name": "deploy-notes", "args": {}}),
    ("toolfunnel_tool_instructions", {"name": "deploy-notes"}),
])
async def test_reference_hand_over_is_gated(
    home: Path, tmp_path: Path, tool: str, args: dict[str, Any]
) -> None:
    """A denied reference tool withholds its instructions; allowed, they are handed over (nothing runs)."""
    with_reference_tool(home)
    danger_log = tmp_path / "danger.log"
    gate = RecordingGate(PreDecision(allow=False, reason="no hand-over"))
    denied = await surface_for(home, gate, ToolState(), danger_log).call(tool, args, CTX)
    assert isinstance(denied, ToolResult)
    assert denied.is_error and denied.denied and denied.first_text() == "no hand-over"
    assert [(c.surfaced, c.mode, c.args) for c in gate.pre] == [("deploy-notes", "reference", {})]
    allow = RecordingGate()
    handed = await surface_for(home, allow, ToolState(), danger_log).call(tool, args, CTX)
    assert isinstance(handed, ToolResult)
    assert handed.first_text() == "SECRET-STEPS: run make deploy"
    assert allow.post == [] and not danger_log.exists()


async def test_gate_sees_every_name_of_a_local_tool(home: Path, tmp_path: Path) -> None:
    """The call the gate sees carries the surfaced name, the id and the display name."""
    gate = RecordingGate()
    await surface_for(home, gate, ToolState(), tmp_path / "d.log").call(
        "toolfunnel_run_tool", {"name": "Danger Demo", "args": {}}, CTX)
    assert gate.pre[0].names() == ("danger", "Danger Demo")
