"""Cancellation and the audit log, the process-level part: a `tfunnel log on` process turning the
log on in a running gateway process, which records it and exits 0 once its stdin closes. The rest
is tests/test_gate_cancel_audit.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.test_gate_cancel_audit import audit_records
from tests.test_stdio_wire import run_tool
from tests.wire import gateway, gateway_argv

pytestmark = pytest.mark.timeout(90)


async def test_turning_the_log_on_while_serving_takes_effect(home: Path) -> None:
    """`tfunnel log on` against a running gateway: the reload is recorded, then later calls are."""
    async with gateway(home) as wire:
        await wire.initialize()
        with trio.fail_after(30):
            done = await trio.run_process(gateway_argv(home, "log", "on"), capture_stdout=True,
                                          capture_stderr=True)
        assert done.returncode == 0
        with trio.fail_after(10):
            while not any(r.get("via") == "file" for r in audit_records(home)):
                await trio.sleep(0.05)
        await wire.request(1, "tools/call", run_tool(1, "uuid", {})["params"])  # type: ignore[arg-type]
        await wire.close_stdin()
        assert await wire.wait_exit() == 0
    records = audit_records(home)
    assert [(r["type"], r.get("via")) for r in records[:2]] == [("config", "cli"), ("config", "file")]
    assert [r["type"] for r in records[2:]] == ["gate", "tool", "client"]
