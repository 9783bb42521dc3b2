"""Signal-driven shutdown of the real stdio gateway: exit status and no surviving process."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import trio

from tests.conftest import add_tools
from tests.test_stdio_wire import SLEEPER, run_tool
from tests.wire import gateway, wait_for_file, wait_gone

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
async def test_signal_during_a_running_tool_kills_the_tree(
    home: Path, tmp_path: Path, signum: signal.Signals, status: int
) -> None:
    """SIGTERM/SIGINT while a tool (with a grandchild) runs → exit 143/130, no process survives."""
    add_tools(home, SLEEPER, scripts=("sleeper.py",))
    pidfile = tmp_path / "pids"
    async with gateway(home) as wire:
        await wire.initialize()
        await wire.send(run_tool(1, "sleeper", {"seconds": 60, "grandchild": True, "pidfile": str(pidfile)}))
        tool_pids = [int(p) for p in (await wait_for_file(pidfile)).split()]
        wire.proc.send_signal(signum)
        assert await wire.wait_exit() == status
        assert await wait_gone([wire.proc.pid, *tool_pids], timeout=5) == []


async def test_sighup_reloads_and_keeps_serving(home: Path) -> None:
    """SIGHUP forces a config reload; the gateway and a running tool carry on."""
    add_tools(home, SLEEPER, scripts=("sleeper.py",))
    async with gateway(home) as wire:
        await wire.initialize()
        await wire.send(run_tool(1, "sleeper", {"seconds": 1}))
        await trio.sleep(0.3)
        wire.proc.send_signal(signal.SIGHUP)
        reply = await wire.reply_to(1)
        assert reply["result"]["structuredContent"] == {"ok": True, "slept": 1}
        assert "SIGHUP: reloading the config" in wire.stderr.decode()
        assert wire.proc.returncode is None
