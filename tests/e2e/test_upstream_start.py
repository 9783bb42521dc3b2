"""Starting upstreams never hold clients up, over HTTP, with a real `tfunnel serve --http`
process: the process-level part of tests/test_upstream_start.py. The service answers at once
while an upstream hangs starting, and a real SIGTERM ends the process with 143 and the hung
upstream with it."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx2
import pytest

from tests.httpgw import http_gateway
from tests.test_http import ACCEPT, open_session
from tests.test_upstream_start import META, PROMPT_S, WINDOW_S, hung, run_tool, set_start_window
from tests.upstreams import set_upstreams
from tests.wire import wait_for_file, wait_gone

pytestmark = pytest.mark.timeout(90)


async def test_http_answers_at_once_while_an_upstream_hangs(home: Path) -> None:
    """Over HTTP: the service listens, and initialize, tools/list and a local tool answer, while an
    upstream is stuck starting; /readyz is not ready until the start window ends."""
    set_start_window(home, WINDOW_S)
    set_upstreams(home, hung(home))
    async with http_gateway(home, settle=False) as gw, httpx2.AsyncClient(timeout=PROMPT_S) as http:
        session = await open_session(http, gw.url)
        headers = {**ACCEPT, "mcp-session-id": session}
        listed = await http.post(f"{gw.url}/mcp", headers=headers,
                                 json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        hashed = await http.post(f"{gw.url}/mcp", headers=headers,
                                 json={"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                       "params": run_tool("hash", {"text": "abc"})})
        ready = await http.get(f"{gw.url}/readyz")
        pid = int(await wait_for_file(home / "slow.pid"))
        gw.proc.send_signal(signal.SIGTERM)
        assert await gw.wait_exit() == 143
    assert await wait_gone([pid]) == []
    assert [t["name"] for t in listed.json()["result"]["tools"]] == META
    assert hashed.json()["result"]["structuredContent"]["hexdigest"].startswith("ba7816bf")
    assert ready.status_code == 503
