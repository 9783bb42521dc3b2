"""Upstream log messages and resource updates with server-everything (npm, a program we did not
write) behind a real gateway process: the process-level part of tests/test_breadth_notices.py. A
legacy SDK client's subscription and log level survive a kill of the upstream (replayed), and a
modern client's listen stream gets the legacy upstream's resource updates."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx2
import pytest
import trio
from mcp import Client
from mcp.shared.subscriptions import ResourceUpdated

from tests.e2e.test_sdk_stdio import sdk_client
from tests.httpgw import http_gateway
from tests.test_breadth_notices import URI, Notes, health
from tests.upstreams import everything_upstream, write_expose

pytestmark = [pytest.mark.timeout(120),
              # The legacy methods a legacy client still uses (deprecated for modern servers).
              pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]


async def test_a_subscription_and_a_log_level_survive_a_kill_of_the_upstream(home: Path) -> None:
    write_expose(home, [everything_upstream()])
    notes = Notes()
    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=10) as http:
        with trio.fail_after(30):
            while (await health(http, gw.url))["state"] != "ready":
                await trio.sleep(0.1)
        async with Client(f"{gw.url}/mcp", mode="legacy", cache=None, message_handler=notes) as client:
            await client.set_logging_level("info")
            await client.subscribe_resource(URI)
            # server-everything acknowledges a subscription with an info log: relayed, tagged.
            await notes.until(lambda: any("Subscribe" in str(d) for _, _, d in notes.logs))
            assert all(logger == "everything" or (logger or "").startswith("everything/")
                       for _, logger, _ in notes.logs)
            await client.call_tool("toolfunnel_run_tool", {"name": "everything_toggle-subscriber-updates",
                                                           "args": {}})
            await notes.until(lambda: URI in notes.updated)
            first = await health(http, gw.url)
            notes.updated.clear()
            notes.logs.clear()
            os.kill(first["pid"], signal.SIGKILL)
            with trio.fail_after(30):
                while (now := await health(http, gw.url))["state"] != "ready" or now["pid"] == first["pid"]:
                    await trio.sleep(0.1)
            # The new incarnation knows of the subscription (and the level) only by replay: its
            # acknowledgement is logged, and the updates it starts go to our URI.
            await notes.until(lambda: any("Subscribe" in str(d) for _, _, d in notes.logs))
            await client.call_tool("toolfunnel_run_tool", {"name": "everything_toggle-subscriber-updates",
                                                           "args": {}})
            await notes.until(lambda: URI in notes.updated)


async def test_a_modern_listen_stream_gets_a_legacy_upstreams_resource_updates(home: Path) -> None:
    """A modern client subscribes on its listen stream; tfunnel subscribes at the (legacy-only)
    upstream for it, and the upstream's update arrives on the stream, tagged."""
    write_expose(home, [everything_upstream()])
    with trio.fail_after(60):
        async with sdk_client(home, mode="2026-07-28") as client, \
                client.listen(resource_subscriptions=[URI]) as sub:
            assert sub.honored is not None and list(sub.honored.resource_subscriptions or ()) == [URI]
            await client.call_tool("toolfunnel_run_tool", {"name": "everything_toggle-subscriber-updates",
                                                           "args": {}})
            async for event in sub:
                if isinstance(event, ResourceUpdated):
                    assert event.uri == URI
                    break
