"""Wrap mode behind the gate, on the wire of an in-process gateway (`tfunnel.testing.gateway`), with
the mock upstream (in-process; a real child where its pid file is the point) and the conformance
fixture (a real child): every wrapped call passes PreToolUse under its Claude Code name
(`mcp__<id>__<tool>`, or `--as`'s id), a deny means the upstream never saw the call, the audit log
records it; the wrap is applied and lifted live; a wrapped upstream that is down gives an empty
list and a clear error, never the funnel surface. A real SIGTERM to a gateway process:
tests/e2e/test_wrap_gate.py."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any
from unittest.mock import Mock

import pytest
import trio
from mcp import Client

from tests.hooks import EXIT2_DENY, set_hooks
from tests.interop import CONFORMANCE_FIXTURE
from tests.test_audit import configure, records
from tests.test_modern_stdio import modern
from tests.upstreams import mock_upstream, set_upstreams
from tests.wire import alive, wait_for_file
from tfunnel.errors import ProtocolError
from tfunnel.observe.audit import DEFAULT_PATH
from tfunnel.route.methods import OWNED, Methods, forwardable
from tfunnel.surface.changes import announced
from tfunnel.surface.face import Face
from tfunnel.testing.gateway import StdioGateway, http_gateway, stdio_gateway

pytestmark = pytest.mark.timeout(60)


def wrap_state(home: Path, state: dict[str, Any]) -> None:
    (home / "tools" / "tools.state.json").write_text(json.dumps(state))


def methods(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


async def call(wire: StdioGateway, request_id: int, name: str, args: dict[str, Any],
               params: dict[str, Any] | None = None) -> dict[str, Any]:
    return await wire.request(request_id, "tools/call", {"name": name, "arguments": args, **(params or {})})


@pytest.mark.parametrize(("state", "matcher", "denied"), [
    pytest.param({"passthrough": "mock"}, "mcp__mock__echo", True, id="claude-code-name"),
    pytest.param({"passthrough": "mock"}, "mock_echo", True, id="surfaced-name"),
    pytest.param({"passthrough": "mock", "passthroughAs": "calc"}, "mcp__calc__echo", True, id="as-name"),
    pytest.param({"passthrough": "mock", "passthroughAs": "calc"}, "mcp__mock__echo", False,
                 id="as-replaces-the-id"),
])
async def test_a_wrapped_call_passes_the_gate_by_its_names(home: Path, tmp_path: Path, state: dict[str, Any],
                                                           matcher: str, denied: bool) -> None:
    log = tmp_path / "methods.log"
    set_upstreams(home, mock_upstream("mock", "--method-log", str(log)))
    wrap_state(home, state)
    set_hooks(home, {"matcher": matcher, "command": EXIT2_DENY})
    configure(home, {"enabled": True})
    async with stdio_gateway(home) as wire:
        await wire.initialize()
        answer = (await call(wire, 1, "echo", {"text": "hi"}))["result"]
    ran = "tools/call" in methods(log)
    assert answer.get("isError", False) is denied and ran is not denied
    if denied:
        assert "exit-2 says no" in answer["content"][0]["text"]
    gate = [r for r in records(home / DEFAULT_PATH) if r["type"] == "gate"]
    assert gate and gate[-1]["decision"] == ("deny" if denied else "allow")
    assert gate[-1]["tool"] == "mock_echo"


async def test_the_wrap_is_applied_and_lifted_live(home: Path) -> None:
    """Writing (and removing) `passthrough` changes the surface of a connected client, which is
    told `tools/list_changed`; initialize then meets the upstream, then tfunnel again."""
    set_upstreams(home, mock_upstream("mock", "--name", "calc-server"))
    async with stdio_gateway(home) as wire:
        funnel = (await wire.initialize())["result"]
        assert funnel["serverInfo"]["name"] == "tfunnel"
        before = [t["name"] for t in (await wire.request(1, "tools/list"))["result"]["tools"]]
        assert "toolfunnel_list_tools" in before and "echo" not in before
        wrap_state(home, {"passthrough": "mock"})
        with trio.fail_after(20):
            while True:
                note = await wire.recv()
                if note.get("method") == "notifications/tools/list_changed":
                    break
        wrapped = [t["name"] for t in (await wire.request(2, "tools/list"))["result"]["tools"]]
        assert "echo" in wrapped and not [n for n in wrapped if n.startswith("toolfunnel_")]
        assert (await call(wire, 3, "echo", {"text": "hi"}))["result"]["content"][0]["text"] == "hi"
        again = (await wire.request(4, "initialize", {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "w", "version": "1"}}))
        assert again["result"]["serverInfo"]["name"] == "calc-server"
        discover = (await wire.request(5, "server/discover", modern()))["result"]
        assert discover["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "calc-server"
        assert "toolfunnel" not in discover.get("instructions", "")
        wrap_state(home, {})
        with trio.fail_after(20):
            while True:
                tools = [t["name"] for t in (await wire.request(6, "tools/list"))["result"]["tools"]]
                if "toolfunnel_list_tools" in tools:
                    break
                await trio.sleep(0.1)


async def test_a_wrapped_upstream_that_is_down_gives_an_empty_list_and_clear_errors(home: Path) -> None:
    """Never the funnel surface: no tool listed, a call says why, and a client starting now is
    told the upstream has not connected rather than shown tfunnel's identity."""
    set_upstreams(home, mock_upstream("mock", "--exit-at-start", "3"))
    wrap_state(home, {"passthrough": "mock"})
    (home / "toolfunnel.json").write_text(json.dumps({"limits": {"upstreamStartS": 1}}))
    async with stdio_gateway(home) as wire:
        init = await wire.request("i", "initialize", {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "w", "version": "1"}})
        assert init["error"]["code"] == -32603 and "'mock' has not connected yet" in init["error"]["message"]
        assert (await wire.request(1, "tools/list"))["result"]["tools"] == []
        answer = (await call(wire, 2, "echo", {"text": "hi"}))["result"]
        assert answer["isError"] is True and "mock" in answer["content"][0]["text"]
        assert (await call(wire, 3, "toolfunnel_list_tools", {}))["result"]["isError"] is True
        discover = await wire.request(4, "server/discover", modern())
        assert discover["error"]["code"] == -32603
        assert (await wire.request(5, "ping"))["result"] == {}


async def test_the_isolation_guard_spares_the_wrapped_upstream_alone(home: Path, tmp_path: Path) -> None:
    """An upstream whose args reach outside the home is refused; wrapped, it runs (the guard is
    suspended for it alone, with a warning); unwrapped again, it is refused again."""
    outside = tmp_path / "outside" / "mock.pid"
    outside.parent.mkdir()
    set_upstreams(home, mock_upstream("mock", "--pid-file", str(outside)))
    async with stdio_gateway(home) as wire:
        await wire.initialize()
        assert not outside.exists()
        wrap_state(home, {"passthrough": "mock"})
        with trio.fail_after(20):
            while "echo" not in [t["name"] for t in (await wire.request(1, "tools/list"))["result"]["tools"]]:
                await trio.sleep(0.1)
        assert outside.exists() and b"isolation guard suspended" in wire.stderr
        pid = int(outside.read_text())
        wrap_state(home, {})
        with trio.fail_after(20):
            while b"refused by the isolation guard" not in wire.stderr.split(b"guard suspended")[-1]:
                await trio.sleep(0.1)
        tools = [t["name"] for t in (await wire.request(2, "tools/list"))["result"]["tools"]]
        assert "toolfunnel_list_tools" in tools and not [t for t in tools if t.startswith("mock_")]
    assert not alive(pid)


@pytest.mark.parametrize(("method", "kind"), [
    ("notifications/tools/list_changed", "tools"),
    ("notifications/prompts/list_changed", "prompts"),
    ("notifications/resources/list_changed", "resources"),
    ("notifications/resources/updated", None),
    ("notifications/message", None),
    ("notifications/roots/list_changed", None),
    ("notifications/tools/list_changed/x", None),
    ("tools/list_changed", None),
])
def test_which_upstream_notifications_announce_a_list(method: str, kind: str | None) -> None:
    assert announced(method) == kind


async def test_a_wrapped_upstreams_list_changed_reaches_the_client_even_when_nothing_changed(
        home: Path) -> None:
    """The conformance fixture's trigger adds and removes a tool and announces it: the list is
    the same, and the client still hears what the server said, on its listen stream (as it would
    directly; the fixture announces it in the modern era only)."""
    set_upstreams(home, {"id": "conf", "command": sys.executable,
                         "args": [str(CONFORMANCE_FIXTURE), "--prefix", "test_"]})
    wrap_state(home, {"passthrough": "conf"})
    async with stdio_gateway(home) as wire:
        await wire.send({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen",
                         "params": modern({"notifications": {"toolsListChanged": True}})})
        with trio.fail_after(10):
            while (await wire.recv()).get("method") != "notifications/subscriptions/acknowledged":
                pass
        answer = await wire.request(1, "tools/call", modern({"name": "test_trigger_tool_change",
                                                            "arguments": {}}))
        assert answer["result"]["content"][0]["text"] == "tool list changed"
        with trio.fail_after(10):
            while (note := await wire.recv()).get("method") != "notifications/tools/list_changed":
                pass
        assert note["params"]["_meta"] == {"io.modelcontextprotocol/subscriptionId": "L"}


async def test_a_legacy_client_meets_a_dual_era_upstream_in_the_legacy_era(home: Path) -> None:
    """The conformance fixture serves one era per connection, and its `test_elicitation` asks by
    a server-to-client request, which only its legacy era can send. tfunnel reaches it in the
    modern era; a legacy client under a wrap gets a legacy-era twin of it, so the question
    reaches that client as a real `elicitation/create`. Lifting the wrap stops the twin."""
    set_upstreams(home, {"id": "conf", "command": sys.executable,
                         "args": [str(CONFORMANCE_FIXTURE), "--prefix", "test_"]})
    wrap_state(home, {"passthrough": "conf"})
    async with stdio_gateway(home) as wire:
        await wire.request("i", "initialize", {"protocolVersion": "2025-11-25",
                                               "capabilities": {"elicitation": {}},
                                               "clientInfo": {"name": "w", "version": "1"}})
        await wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert b"legacy twin starting" in wire.stderr
        pids = [int(p) for p in re.findall(rb'"pid": (\d+), "peer": "pid \d+", "event": "upstream starting"',
                                           wire.stderr)]
        # The supervised one (started again to present this client as itself), then the twin.
        main, twin = pids[-2:]
        await wire.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                         "params": {"name": "test_elicitation", "arguments": {"message": "name?"}}})
        with trio.fail_after(20):
            while (asked := await wire.recv()).get("method") != "elicitation/create":
                pass
        assert asked["params"]["message"] == "name?"
        await wire.send({"jsonrpc": "2.0", "id": asked["id"],
                         "result": {"action": "accept", "content": {"response": "Ada"}}})
        answer = (await wire.reply_to(1))["result"]
        assert "Ada" in json.dumps(answer) and not answer.get("isError")
        wrap_state(home, {})
        # Unwrapped, the twin goes (and the supervised one too: the guard refuses it again).
        with trio.fail_after(20):
            while alive(twin) or alive(main):
                await trio.sleep(0.1)


async def test_a_cancelled_wrapped_call_is_cancelled_upstream_by_its_own_id(home: Path,
                                                                            tmp_path: Path) -> None:
    """Progress reaches the client under its own token, and a cancel reaches the upstream with the
    upstream's own request id (the gateway's leg), not the client's."""
    cancel_log = tmp_path / "cancels"  # outside the home: a wrap suspends the isolation guard
    set_upstreams(home, mock_upstream("mock", "--cancel-log", str(cancel_log)))
    wrap_state(home, {"passthrough": "mock"})
    async with stdio_gateway(home) as wire:
        await wire.initialize()
        progress = await call(wire, 1, "progress", {"steps": 2}, {"_meta": {"progressToken": "tok"}})
        assert not progress["result"].get("isError"), progress
        beats = [m for m in wire.stash if m.get("method") == "notifications/progress"]
        assert beats and all(m["params"]["progressToken"] == "tok" for m in beats)
        await wire.send({"jsonrpc": "2.0", "id": "client-7", "method": "tools/call",
                         "params": {"name": "slow", "arguments": {"seconds": 30}}})
        await trio.sleep(0.5)
        await wire.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": "client-7"}})
        logged = json.loads(await wait_for_file(cancel_log))
        assert isinstance(logged, int)
        await wire.expect_no_reply(0.5)


@pytest.mark.parametrize(("method", "forwarded"), [
    ("custom/thing", True), ("x", True), ("completion/other", True),
    ("tools/call", False), ("Tools/call", False), ("tools/call/", False), ("TOOLS/LIST", False),
    ("tools/anything", False), ("notifications/cancelled", False), ("notifications/initialized", False),
    ("logging/setlevel", False), ("Initialize", False), ("PROMPTS/GET", False),
    ("sampling/createMessage", False), ("elicitation/create", False), ("roots/list", False),
    ("tasks/get", False), ("Tasks/Cancel", False),
])
def test_which_methods_may_go_to_the_wrapped_upstream(method: str, forwarded: bool) -> None:
    assert forwardable(method) is forwarded


def test_every_method_tfunnel_answers_is_known_in_every_spelling() -> None:
    table = Methods(Mock(), Mock()).table
    assert all(not forwardable(name) and not forwardable(name.upper()) for name in (*table, *OWNED))


async def test_only_methods_of_the_upstreams_own_are_forwarded_and_each_is_audited(
        home: Path, tmp_path: Path) -> None:
    log = tmp_path / "methods.log"
    set_upstreams(home, mock_upstream("mock", "--method-log", str(log)))
    wrap_state(home, {"passthrough": "mock"})
    configure(home, {"enabled": True})
    async with stdio_gateway(home) as wire:
        await wire.initialize()
        for index, method in enumerate(("Tools/call", "notifications/cancelled", "sampling/createMessage",
                                        "tasks/get", "custom/thing")):
            reply = await wire.request(index, method, {"name": "echo", "arguments": {"text": "x"}})
            assert "error" in reply
    seen = methods(log)
    assert "custom/thing" in seen
    assert not {"Tools/call", "notifications/cancelled", "sampling/createMessage", "tasks/get"} & set(seen)
    assert [r["method"] for r in records(home / DEFAULT_PATH) if r["type"] == "forward"] == ["custom/thing"]


async def test_lifting_a_stdio_wrap_connects_the_upstream_again_as_the_gateway(home: Path,
                                                                                 tmp_path: Path) -> None:
    """The client a stdio wrap presented upstream (its capabilities, its answers to the upstream's
    own requests) is the wrap's only: unwrapped, the upstream connects again as the gateway."""
    log = home / "methods.log"  # inside the home: unwrapped, the isolation guard allows it again
    set_upstreams(home, mock_upstream("mock", "--method-log", str(log)))
    wrap_state(home, {"passthrough": "mock"})
    async with stdio_gateway(home) as wire:  # the test starts once the upstream connected (as us)
        await wire.request("i", "initialize", {"protocolVersion": "2025-11-25",
                                               "capabilities": {"sampling": {}, "roots": {}},
                                               "clientInfo": {"name": "desk", "version": "9"}})
        assert methods(log).count("initialize") == 2  # again, presenting the client
        wrap_state(home, {})
        with trio.move_on_after(20):
            while methods(log).count("initialize") < 3:
                await trio.sleep(0.1)
        assert methods(log).count("initialize") == 3, wire.stderr.decode()[-3000:]


async def test_a_legacy_client_of_a_modern_only_upstream_is_bridged(home: Path) -> None:
    """No twin for an upstream reached modern-only: a legacy client gets an `initialize` made from
    the upstream's discover, and the upstream's `input_required` reaches it as a real
    `elicitation/create`, whose answer goes back on the upstream's retry."""
    set_upstreams(home, {"id": "conf", "command": sys.executable, "modernOnly": True,
                         "args": [str(CONFORMANCE_FIXTURE), "--prefix", "test_"]})
    wrap_state(home, {"passthrough": "conf"})
    async with stdio_gateway(home) as wire:
        init = (await wire.request("i", "initialize", {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "w", "version": "1"}}))["result"]
        await wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert init["serverInfo"]["name"] == "conformance-fixture" and "tools" in init["capabilities"]
        assert b"legacy twin starting" not in wire.stderr
        await wire.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                         "params": {"name": "test_input_required_result_elicitation", "arguments": {}}})
        with trio.fail_after(20):
            while (asked := await wire.recv()).get("method") != "elicitation/create":
                pass
        await wire.send({"jsonrpc": "2.0", "id": asked["id"],
                         "result": {"action": "accept", "content": {"name": "Ada"}}})
        answer = (await wire.reply_to(1))["result"]
    assert "Ada" in json.dumps(answer) and not answer.get("isError") and "resultType" not in answer


@pytest.mark.parametrize(("capabilities", "method", "refused"), [
    ({}, "prompts/list", True),
    ({"prompts": {}}, "prompts/get", False),
    ({"prompts": True}, "prompts/list", True),  # a capability is an object
    ({"resources": {}}, "resources/read", False),
    ({"resources": {}}, "resources/subscribe", True),
    ({"resources": {"subscribe": True}}, "resources/unsubscribe", False),
    ({"resources": {"subscribe": "yes"}}, "resources/subscribe", True),
    ({}, "completion/complete", True),
    ({"completions": {}}, "completion/complete", False),
    ({}, "logging/setLevel", True),
    ({}, "tools/call", False),  # always answered (and gated)
    ({}, "ping", False),
])
def test_a_wrap_refuses_what_its_upstream_did_not_declare(capabilities: dict[str, Any], method: str,
                                                          refused: bool) -> None:
    face = Face({"name": "up"}, capabilities, wrapped="up")
    if refused:
        with pytest.raises(ProtocolError) as raised:
            face.refuse_undeclared(method)
        assert raised.value.code == -32601
    else:
        face.refuse_undeclared(method)
    Face({"name": "tfunnel"}, {}).refuse_undeclared(method)  # tfunnel's own face refuses nothing here


async def test_legacy_clients_arriving_together_get_one_twin(home: Path) -> None:
    set_upstreams(home, {"id": "conf", "command": sys.executable,
                         "args": [str(CONFORMANCE_FIXTURE), "--prefix", "test_"]})
    wrap_state(home, {"passthrough": "conf"})

    async def legacy_client(url: str) -> None:
        async with Client(f"{url}/mcp", mode="legacy", cache=None) as client:
            assert (await client.call_tool("test_simple_text", {})).content

    with trio.fail_after(60):
        async with http_gateway(home) as gw, trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(legacy_client, gw.url)
    assert gw.stderr.count(b"legacy twin starting") == 1
