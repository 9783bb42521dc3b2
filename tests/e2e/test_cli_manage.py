"""`tfunnel tools` beside a gateway process: whether the listing is live is whether the process
that wrote it still runs (its pid), so both are real processes; the process-level part of
tests/test_cli_manage.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.wire import gateway, gateway_argv

pytestmark = pytest.mark.timeout(90)


async def test_tfunnel_tools_lists_upstream_tools_live_or_cached(home: Path) -> None:
    """`tfunnel tools` shows the upstream tools a gateway of this home listed, without starting
    any upstream: live while that gateway runs, then as cached (saying when)."""
    async def tools() -> str:
        with trio.fail_after(60):
            done = await trio.run_process(gateway_argv(home, "tools"), capture_stdout=True,
                                          capture_stderr=True)
        return str(done.stdout.decode())

    first = await tools()
    assert "none listed yet" in first, first
    async with gateway(home) as wire:
        await wire.initialize()
        shown = await tools()
        assert "live, from the gateway running as pid" in shown and "demo_ping" in shown
        await wire.close_stdin()
        assert await wire.wait_exit() == 0
    shown = await tools()
    assert "as listed at" in shown and "no gateway runs now" in shown and "demo_ping" in shown
