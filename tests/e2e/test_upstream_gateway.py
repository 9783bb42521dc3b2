"""Upstreams behind a real `tfunnel serve` process: the process-level part of
tests/test_upstream_gateway.py. No process of the tree (the gateway, a SIGTERM-ignoring upstream,
its grandchild) survives the gateway's stdin EOF or a real SIGTERM (exit 143), and an upstream's
progress reaches the official SDK client over the gateway's real stdio."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import trio

from tests.e2e.test_sdk_stdio import sdk_client
from tests.test_upstream_gateway import call, run_tool
from tests.upstreams import mock_upstream, set_upstreams
from tests.wire import gateway, wait_for_file, wait_gone
from tfunnel.testing.sdk import text

pytestmark = pytest.mark.timeout(90)


async def test_progress_is_relayed_for_direct_calls(home: Path) -> None:
    """An upstream's progress notifications reach the client under the client's own token."""
    set_upstreams(home, mock_upstream("mock"), expose=[{"upstream": "mock", "tool": "progress"}])
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with sdk_client(home) as client:
        result = await client.call_tool("mock_progress", {"steps": 3, "delay": 0.05},
                                        progress_callback=on_progress)
        assert text(result) == "progress done (token seen)"
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]



@pytest.mark.parametrize("how", ["stdin-eof", "sigterm"])
async def test_no_process_of_the_tree_survives_shutdown(home: Path, tmp_path: Path, how: str) -> None:
    """stdin EOF or SIGTERM with a call in flight: the SIGTERM-ignoring upstream and its grandchild die."""
    pid_file = home / "mock.pid"
    set_upstreams(home, mock_upstream("mock", "--ignore-sigterm", "--pid-file", str(pid_file)))
    async with gateway(home) as wire:
        await wire.initialize()
        spawned = await call(wire, 1, "mock_spawn", {})
        grandchild = spawned["result"]["structuredContent"]["pid"]
        upstream = int(await wait_for_file(pid_file))
        await wire.send(run_tool(2, "mock_slow", {"seconds": 60}))
        await trio.sleep(0.3)
        if how == "sigterm":
            wire.proc.send_signal(signal.SIGTERM)
        else:
            await wire.close_stdin()
        assert await wire.wait_exit(timeout=30) == (143 if how == "sigterm" else 0)
    assert await wait_gone([upstream, grandchild, wire.proc.pid], timeout=5) == []
