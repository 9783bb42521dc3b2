"""Many tfunnel instances of one home behind a real nginx, configured by the shipped
`conf/nginx/tfunnel.conf`, driven by the official SDK client: legacy sessions stick to the
instance that minted them, modern requests spread over all, an MRTR ask is answered on another
instance than the one that asked, and an instance drained by SIGTERM in the middle of traffic
loses no call."""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from mcp import Client, ClientSession
from mcp.client.sse import sse_client
from mcp.types import CallToolResult

from tests.hooks import decision, set_hooks
from tests.httpgw import http_gateway
from tests.nginx import Cluster, cluster, nginx_binary
from tests.test_gate_hooks import elicitation

pytestmark = pytest.mark.timeout(150)

V = "2026-07-28"
SLOW = {"name": "demo_slow", "args": {"seconds": 2}}


@pytest.fixture
def shared(home: Path) -> Path:
    """The home every instance serves, with the shared requestState key."""
    nginx_binary()  # skips (naming why) before any instance starts when nginx is missing
    path = home / "toolfunnel.json"
    settings = json.loads(path.read_text())
    path.write_text(json.dumps({**settings, "stateKeyFile": "state.key"}))
    return home


def ok(result: CallToolResult) -> CallToolResult:
    assert not result.is_error, result.content
    return result


async def echo(client: Client | ClientSession, text: str = "hi") -> None:
    result = ok(await client.call_tool("toolfunnel_run_tool", {"name": "demo_echo", "args": {"text": text}}))
    assert text in json.dumps(result.model_dump(mode="json"))


@asynccontextmanager
async def legacy_on_each(c: Cluster, stack: AsyncExitStack) -> AsyncIterator[dict[str, Client]]:
    """One legacy SDK session per instance, through the proxy, keyed by the instance it lives
    on (told by each instance's /health after each connect)."""
    placed: dict[str, Client] = {}
    for _ in c.instances:
        before = await c.sessions()
        client = await stack.enter_async_context(Client(c.mcp, mode="legacy", cache=None))
        # The SDK checks a result against the tool's outputSchema, listing the tools first when it
        # has no list yet: listed now, a call is one request.
        await client.list_tools()
        after = await c.sessions()
        [name] = [n for n in after if after[n] == before[n] + 1]
        placed[name] = client
    yield placed


async def test_legacy_sessions_stay_on_their_instance_across_many_requests(shared: Path,
                                                                           tmp_path: Path) -> None:
    """New sessions spread round robin; every later request of a session (calls, lists, the
    notifications it sends) reaches the instance holding it: no 404 in 3 x 25 calls. The 2024
    HTTP+SSE transport (GET /sse, POST /messages?session_id=) sticks the same way."""
    async with cluster(shared, tmp_path / "nginx") as c, AsyncExitStack() as stack, \
            legacy_on_each(c, stack) as placed:
        assert sorted(placed) == ["9001", "9002", "9003"]  # one session on each instance
        calls_before = await c.requests()

        async def drive(client: Client, name: str) -> None:
            for i in range(25):
                await echo(client, f"{name}-{i}")
            assert "toolfunnel_run_tool" in [t.name for t in (await client.list_tools()).tools]

        async with trio.open_nursery() as nursery:
            for name, client in placed.items():
                nursery.start_soon(drive, client, name)
        calls_after = await c.requests()
        assert {n: calls_after[n] - calls_before[n] for n in calls_after} == dict.fromkeys(placed, 25)
        for _ in range(3):
            async with sse_client(f"{c.proxy.url}/sse") as (read, write), ClientSession(read, write) as old:
                await old.initialize()
                for i in range(5):
                    await echo(old, f"sse-{i}")
        assert "error" not in c.proxy.error_log().lower(), c.proxy.error_log()


async def test_modern_requests_spread_over_every_instance(shared: Path, tmp_path: Path) -> None:
    async with cluster(shared, tmp_path / "nginx") as c:
        before = await c.requests()
        async with Client(c.mcp, mode="auto", cache=None) as client:
            assert client.protocol_version == V
            for i in range(30):
                await echo(client, f"m{i}")
        after = await c.requests()
    spread = {n: after[n] - before[n] for n in after}
    assert sum(spread.values()) == 30
    assert all(count >= 5 for count in spread.values()), spread  # round robin: about 10 each


def ask_danger(home: Path, tmp_path: Path) -> dict[str, str]:
    """A PreToolUse hook that asks before `danger` runs; the env that makes `danger` leave a file."""
    set_hooks(home, {"command": decision("ask", "Danger ahead"), "matcher": "danger"})
    return {"TOOLFUNNEL_DANGER_LOG": str(tmp_path / "danger.log")}


MODERN_HEADERS = {"accept": "application/json, text/event-stream", "mcp-protocol-version": V,
                  "mcp-method": "tools/call", "mcp-name": "toolfunnel_run_tool"}
ASKING = {"io.modelcontextprotocol/protocolVersion": V,
          "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
          "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}


async def ask_on_one_answer_on_another(first: str, second: str) -> dict[str, Any]:
    """Round one of a gated call on instance `first`, its retry (the answer and the sealed state)
    on `second`; the retry's JSON-RPC reply."""
    call = {"name": "toolfunnel_run_tool", "arguments": {"name": "danger", "args": {}}, "_meta": ASKING}
    async with httpx2.AsyncClient(timeout=30) as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
        asked = (await http.post(f"{first}/mcp", headers=MODERN_HEADERS, json=body)).json()
        result = asked["result"]
        assert result["resultType"] == "input_required", result
        (key, _), = result["inputRequests"].items()
        retry = {**call, "requestState": result["requestState"],
                 "inputResponses": {key: {"action": "accept", "content": {}}}}
        reply = await http.post(f"{second}/mcp", headers=MODERN_HEADERS,
                                json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": retry})
        answer: dict[str, Any] = reply.json()
        return answer


@pytest.mark.parametrize("shared_key", [True, False], ids=["stateKeyFile", "a-key-per-process"])
async def test_an_mrtr_retry_is_opened_by_another_instance_only_with_the_shared_key(
        home: Path, tmp_path: Path, shared_key: bool) -> None:
    env = ask_danger(home, tmp_path)
    if shared_key:
        settings = json.loads((home / "toolfunnel.json").read_text())
        (home / "toolfunnel.json").write_text(json.dumps({**settings, "stateKeyFile": "state.key"}))
    async with http_gateway(home, env) as a, http_gateway(home, env) as b:
        answer = await ask_on_one_answer_on_another(a.url, b.url)
    if shared_key:
        assert answer["result"]["resultType"] == "complete" and not answer["result"].get("isError"), answer
        assert (tmp_path / "danger.log").exists()
    else:  # the control: without the shared key the other instance cannot open the state
        assert answer["error"]["code"] == -32602 and "bad signature" in answer["error"]["message"]
        assert not (tmp_path / "danger.log").exists()


async def test_an_sdk_clients_mrtr_round_trip_through_the_proxy(shared: Path, tmp_path: Path) -> None:
    """The SDK's MRTR loop through nginx: the ask and the answered retry land on two instances
    (round robin; each instance's /metrics says where), and the gated tool runs once."""
    env = ask_danger(shared, tmp_path)
    seen: list[str] = []
    answering = elicitation("accept", seen)
    async with cluster(shared, tmp_path / "nginx", 3, env) as c, \
            Client(c.mcp, mode="auto", cache=None, elicitation_callback=answering) as client:
        before = await c.requests()
        ok(await client.call_tool("toolfunnel_run_tool", {"name": "danger", "args": {}}))
        after = await c.requests()
    assert seen and seen[0].startswith("Danger ahead")
    rounds = {n: after[n] - before[n] for n in after if after[n] != before[n]}
    assert sorted(rounds.values()) == [1, 1], rounds  # two rounds, two instances
    assert (tmp_path / "danger.log").read_text().count("\n") == 1


async def until(check: Callable[[], bool], timeout: float = 20.0) -> None:
    with trio.fail_after(timeout):
        while not check():
            await trio.sleep(0.02)


async def test_sigterm_to_one_instance_mid_traffic_loses_no_call(shared: Path, tmp_path: Path) -> None:
    """Instance 9001 is stopped (SIGTERM) while modern clients call through the proxy, legacy
    sessions work on every instance, and slow calls run on 9001 itself. /readyz of 9001 says 503
    at once; every call through the proxy succeeds (what 9001 refuses while draining, or can no
    longer be reached, goes to the others); 9001's calls in flight finish; a session opened
    during the drain lands elsewhere; 9001 exits 143 and the others never notice."""
    failures: list[str] = []
    done = {"modern": 0, "legacy": 0}
    stop = trio.Event()
    async with cluster(shared, tmp_path / "nginx") as c, AsyncExitStack() as stack, \
            legacy_on_each(c, stack) as placed:
        victim = c.instances["9001"]

        async def modern_traffic() -> None:
            async with Client(c.mcp, mode="auto", cache=None) as client:
                while not stop.is_set():
                    try:
                        await echo(client)
                    except Exception as exc:  # every failure is the test's finding
                        failures.append(f"modern: {exc!r}")
                    done["modern"] += 1

        async def legacy_traffic(client: Client) -> None:
            while not stop.is_set():
                try:
                    await echo(client)
                except Exception as exc:
                    failures.append(f"legacy: {exc!r}")
                done["legacy"] += 1
                await trio.sleep(0.01)

        async def in_flight(results: list[str]) -> None:
            """Slow calls on 9001 itself, running when SIGTERM arrives: one modern, one in the
            legacy session that lives there."""
            async def modern_slow() -> None:
                async with Client(f"{victim.url}/mcp", mode="auto", cache=None) as client:
                    await client.list_tools()  # so that the call is one request (see legacy_on_each)
                    ok(await client.call_tool("toolfunnel_run_tool", SLOW))
                    results.append("modern")

            async def legacy_slow() -> None:
                ok(await placed["9001"].call_tool("toolfunnel_run_tool", SLOW))
                results.append("legacy")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(modern_slow)
                nursery.start_soon(legacy_slow)

        slow_done: list[str] = []
        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(modern_traffic)
            for name in ("9002", "9003"):
                nursery.start_soon(legacy_traffic, placed[name])
            nursery.start_soon(in_flight, slow_done)
            await until(lambda: done["modern"] >= 40)
            await trio.sleep(0.5)  # the slow calls are under way
            victim.proc.send_signal(signal.SIGTERM)
            async with httpx2.AsyncClient(timeout=5) as http:
                ready = await http.get(f"{victim.url}/readyz")
            assert ready.status_code == 503
            async with Client(c.mcp, mode="legacy", cache=None) as newcomer:  # opened while 9001 drains
                await echo(newcomer, "new")
            assert await victim.wait_exit(30) == 143
            at_exit = done["modern"]
            await until(lambda: done["modern"] >= at_exit + 60)  # 9001 is gone: only the others answer
            stop.set()
        assert sorted(slow_done) == ["legacy", "modern"]
        # nginx's error log says what a failed call met (a refused connection, a reset...).
        assert failures == [], (failures[:5], c.proxy.error_log()[-3000:])
        assert done["legacy"] > 10
        # 9001's legacy session ended with it: its client hears so, and hangs on nothing.
        gone = "Session not found: the instance that held it has stopped"
        with trio.fail_after(10), pytest.raises(Exception, match=gone):
            await echo(placed["9001"])
        after = await c.requests()
        assert set(after) == {"9002", "9003"} and all(count > 0 for count in after.values())
