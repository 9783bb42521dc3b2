"""list_changed over HTTP once `initialize` is answered, whether or not the client sent
`notifications/initialized`: on a Streamable HTTP session's GET stream and on a 2024 HTTP+SSE
stream, as on stdio (`Connection.list_changed`; the spec holds back a server's requests until
`initialized`, not its notifications)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
import trio

from tests.test_http import ACCEPT, INIT, open_session
from tfunnel.testing.gateway import http_gateway

pytestmark = pytest.mark.timeout(90)
LIST_CHANGED = "notifications/tools/list_changed"


async def next_data(lines: AsyncIterator[str]) -> dict[str, object]:
    """The next SSE event's JSON data (comments, keep-alives and other fields skipped)."""
    while True:
        line = await anext(lines)
        if line.startswith("data: ") and line[6:].startswith("{"):
            value = json.loads(line.removeprefix("data: "))
            assert isinstance(value, dict)
            return value


def flip_hot(home: Path, hot: bool) -> None:
    (home / "tools" / "tools.state.json").write_text(json.dumps({"hash": {"hot": hot}}))


async def test_a_2024_sse_session_hears_list_changed_before_initialized(home: Path) -> None:
    """On GET /sse, once the initialize posted to /messages is answered on the stream, a state
    edit's list_changed arrives there too (this stream once waited for `initialized`)."""
    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=10) as http:
        with trio.fail_after(40):
            async with http.stream("GET", f"{gw.url}/sse") as stream:
                lines = stream.aiter_lines()
                endpoint = ""
                while not endpoint.startswith("data: "):
                    endpoint = await anext(lines)
                messages = f"{gw.url}{endpoint.removeprefix('data: ')}"
                assert (await http.post(messages, json=INIT, headers=ACCEPT)).status_code == 202
                assert (await next_data(lines))["id"] == 1
                listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
                assert (await http.post(messages, json=listing, headers=ACCEPT)).status_code == 202
                assert (await next_data(lines))["id"] == 2
                flip_hot(home, True)  # no notifications/initialized was sent
                assert (await next_data(lines))["method"] == LIST_CHANGED


async def test_a_streamable_http_get_stream_hears_list_changed_before_initialized(home: Path) -> None:
    """A session that never sent `initialized` hears of a change on its GET stream."""
    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=10) as http:
        headers = {"accept": "text/event-stream", "mcp-session-id": await open_session(http, gw.url)}
        with trio.fail_after(40):
            assert (await http.post(f"{gw.url}/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                                    headers={**ACCEPT, "mcp-session-id": headers["mcp-session-id"]})
                    ).status_code == 200
            async with http.stream("GET", f"{gw.url}/mcp", headers=headers) as stream, \
                    trio.open_nursery() as nursery:
                assert stream.status_code == 200

                async def keep_changing() -> None:
                    """Until one is told: the stream's loop may start listening after a change."""
                    for turn in range(1000):
                        flip_hot(home, turn % 2 == 0)
                        await trio.sleep(1)

                nursery.start_soon(keep_changing)
                assert (await next_data(stream.aiter_lines()))["method"] == LIST_CHANGED
                nursery.cancel_scope.cancel()
