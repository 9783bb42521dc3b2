"""Bounded processes, the process-level part: a stdio client's requests in flight are bounded on a
real gateway process's pipes, and its reader keeps reading (an answer and a cancel get through)
while the bound holds. The rest is tests/test_process_limits.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.test_process_limits import run_tool
from tests.wire import gateway

pytestmark = pytest.mark.timeout(90)


async def test_a_stdio_client_cannot_pile_up_requests_without_bound(home: Path) -> None:
    """A stdio client may have at most MAX_INFLIGHT requests in flight: one more is refused at
    once (the reader keeps reading, so answers and cancels still get through)."""
    from tests.upstreams import mock_upstream, set_upstreams
    from tfunnel.serve.connection import MAX_INFLIGHT

    set_upstreams(home, mock_upstream("mock", "--tools", "hang", timeoutMs=600_000))
    async with gateway(home) as wire:
        await wire.initialize()
        for request_id in range(MAX_INFLIGHT):
            await wire.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                             "params": {"name": "toolfunnel_run_tool",
                                        "arguments": {"name": "mock_hang", "args": {}}}})
        await wire.send(run_tool(MAX_INFLIGHT, "hash", {"text": "x"}))
        with trio.fail_after(20):
            refused = await wire.reply_to(MAX_INFLIGHT)
        assert refused["error"]["code"] == -32603 and "in flight" in refused["error"]["message"]
        await wire.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 0}})
        with trio.fail_after(20):  # a slot is free again: the next request runs
            while True:
                reply = await wire.request("again", "tools/call",
                                           run_tool("again", "hash", {"text": "x"})["params"])  # type: ignore[arg-type]
                if "result" in reply:
                    break
                await trio.sleep(0.1)
        assert "isError" not in reply["result"]
