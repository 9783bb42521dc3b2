"""The one method table through both era adapters, and the modern adapter's MRTR ask as a value."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.hooks import decision, set_hooks
from tfunnel.config.load import load_register, load_settings
from tfunnel.config.model import Register, Settings, ToolState
from tfunnel.errors import ProtocolError, UpstreamRemoteError
from tfunnel.gate.engine import HookEngine
from tfunnel.gate.gated import ALLOW, NeedsInput, Outcome, PreDecision, ToolCall
from tfunnel.gate.manifest import load_manifest
from tfunnel.observe.audit import AuditLog
from tfunnel.protocol.eras import Era
from tfunnel.protocol.jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, RESOURCE_NOT_FOUND, Request
from tfunnel.protocol.modern import SERVER_INFO_META
from tfunnel.protocol.results import ToolResult
from tfunnel.protocol.session import ClientSession
from tfunnel.route import Router
from tfunnel.route.modern import CONFIRM_PREFIX
from tfunnel.surface.catalog import Catalog
from tfunnel.surface.context import CallContext
from tfunnel.surface.reads import Reads
from tfunnel.surface.service import Surface
from tfunnel.surface.upstream_items import Extras, qualified
from tfunnel.testing.fakes import NoUpstreams
from tfunnel.tools.runner import LocalRunner

pytestmark = pytest.mark.timeout(60)

V = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {}}
ASKING = {**META, "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
TOOLS = [{"name": "t", "inputSchema": {"type": "object"}}]
RAN = {"content": [{"type": "text", "text": "ran"}]}


class FakeTools:
    """The surface as the table sees it: one listed tool; calls are recorded and answer `RAN`."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def list_tools(self, ctx: CallContext | None = None) -> list[dict[str, Any]]:
        return TOOLS

    def instructed(self, ctx: CallContext, instructions: str) -> None:
        return None

    def end_session(self, session_id: str) -> None:
        return None

    def tool_schema(self, name: str, profile: Any = None) -> None:
        return None

    async def call(self, name: str, args: Any, ctx: CallContext) -> Outcome:
        self.calls.append((name, args))
        return ToolResult.text("ran")


class NoHooks:
    async def session_start(self, session_id: str) -> str:
        return ""

    async def session_end(self, session_id: str) -> None:
        return None


def router(tmp_path: Path, surface: Any) -> Router:
    audit = AuditLog(tmp_path)
    catalog = Catalog(Register(), ToolState())
    reads = Reads(lambda: catalog, lambda: AllowAll(), NoUpstreams(), audit)
    return Router(lambda: Settings(), surface, NoHooks(), audit, reads=reads)


class AllowAll:
    async def pre_tool_use(self, call: ToolCall) -> PreDecision:
        return ALLOW

    async def post_tool_use(self, call: ToolCall, result: ToolResult) -> None:
        return None


BOTH = (Era.LEGACY, Era.MODERN)
TABLE: list[tuple[str, dict[str, Any], tuple[Era, ...], dict[str, Any] | int]] = [
    ("ping", {}, (Era.LEGACY,), {}),
    ("ping", {}, (Era.MODERN,), METHOD_NOT_FOUND),
    ("tools/list", {}, BOTH, {"tools": TOOLS}),
    ("tools/list", {"cursor": None}, BOTH, {"tools": TOOLS}),
    ("tools/list", {"cursor": "next"}, BOTH, INVALID_PARAMS),
    ("tools/call", {}, BOTH, INVALID_PARAMS),
    ("tools/call", {"name": ""}, BOTH, INVALID_PARAMS),
    ("tools/call", {"name": 7}, BOTH, INVALID_PARAMS),
    ("tools/call", {"name": "t"}, BOTH, RAN),
    ("prompts/list", {}, BOTH, {"prompts": []}),
    ("resources/list", {}, BOTH, {"resources": []}),
    ("resources/templates/list", {}, BOTH, {"resourceTemplates": []}),
    ("prompts/list", {"cursor": "forged"}, BOTH, INVALID_PARAMS),
    ("prompts/get", {"name": "p"}, BOTH, INVALID_PARAMS),
    ("prompts/get", {}, BOTH, INVALID_PARAMS),
    ("prompts/get", {"name": "p", "arguments": {"a": 1}}, BOTH, INVALID_PARAMS),
    # A resource that does not exist: -32002 in the legacy era, -32602 in the modern one.
    ("resources/read", {"uri": "file:///x"}, (Era.LEGACY,), RESOURCE_NOT_FOUND),
    ("resources/read", {"uri": "file:///x"}, (Era.MODERN,), INVALID_PARAMS),
    ("resources/read", {"uri": 3}, BOTH, INVALID_PARAMS),
    ("completion/complete", {"ref": {"type": "ref/prompt", "name": "p"}, "argument": {"name": "a",
                             "value": ""}}, BOTH, INVALID_PARAMS),
    ("completion/complete", {"ref": {"type": "nope"}, "argument": {}}, BOTH, INVALID_PARAMS),
    ("initialize", {"protocolVersion": V}, (Era.MODERN,), METHOD_NOT_FOUND),
    ("no/such", {}, BOTH, METHOD_NOT_FOUND),
]
CASES = [pytest.param(method, params, era, expected, id=f"{era.value}-{method}-{i}")
         for i, (method, params, eras, expected) in enumerate(TABLE) for era in eras]


@pytest.mark.parametrize(("method", "params", "era", "expected"), CASES)
async def test_each_method_in_each_era(tmp_path: Path, method: str, params: dict[str, Any], era: Era,
                                       expected: dict[str, Any] | int) -> None:
    """Every method answers the same in both eras (the modern one finished with resultType and
    our serverInfo); a bad cursor or name is -32602 before the surface is called; what an era
    does not serve is -32601."""
    tools = FakeTools()
    wire_params = {**params, "_meta": META} if era is Era.MODERN else params
    request = Request(1, method, wire_params)
    with trio.fail_after(10):
        try:
            result: dict[str, Any] | int = await router(tmp_path, tools).handle(
                ClientSession("s"), request, era=era)
        except ProtocolError as exc:
            result = exc.code
    if era is Era.MODERN and isinstance(result, dict):
        assert result.pop("resultType") == "complete"
        assert result.pop("_meta")[SERVER_INFO_META]["name"] == "tfunnel"
        result.pop("ttlMs", None), result.pop("cacheScope", None)
    assert result == expected
    assert tools.calls == ([("t", {})] if expected == RAN else [])


# --------------------------------------------------------------------------- the gate's ask (MRTR)


def asking_surface(home: Path, danger_log: Path) -> Surface:
    """The real surface, hook engine and runner, with one PreToolUse hook that asks."""
    set_hooks(home, {"command": decision("ask", "Danger ahead")})
    audit = AuditLog(home)
    gate = HookEngine(home, lambda: load_manifest(home), lambda: "deny", audit, dict(os.environ))
    catalog = Catalog(load_register(home), ToolState())
    runner = LocalRunner(home, load_settings(home).limits,
                         {**os.environ, "TOOLFUNNEL_DANGER_LOG": str(danger_log)})
    return Surface(lambda: catalog, lambda: gate, runner, NoUpstreams(), audit)


async def test_a_modern_ask_is_a_value_sealed_into_input_required(home: Path, tmp_path: Path) -> None:
    """The gate's `ask` to a modern client returns `NeedsInput` out of the gate (no exception):
    the surface hands it back, nothing runs, and the adapter seals it into input_required; the
    retry with the accepted answer runs the tool."""
    danger_log = tmp_path / "danger.log"
    surface = asking_surface(home, danger_log)
    params = {"name": "toolfunnel_run_tool", "arguments": {"name": "danger", "args": {}}, "_meta": ASKING}
    gateway = router(tmp_path, surface)
    with trio.fail_after(30):
        first = await gateway.handle(ClientSession("s"), Request(1, "tools/call", params), era=Era.MODERN)
        assert first["resultType"] == "input_required" and not danger_log.exists()
        (key, question), = first["inputRequests"].items()
        assert key.startswith(CONFIRM_PREFIX) and question["method"] == "elicitation/create"
        assert question["params"]["message"].startswith("Danger ahead")
        retry = {**params, "requestState": first["requestState"],
                 "inputResponses": {key: {"action": "accept"}}}
        done = await gateway.handle(ClientSession("s"), Request(2, "tools/call", retry), era=Era.MODERN)
    assert done["resultType"] == "complete" and not done.get("isError"), done
    assert danger_log.exists()


async def test_the_surface_returns_the_ask_as_a_value(home: Path, tmp_path: Path) -> None:
    """Called directly with a channel whose `ask` cannot be answered now, `Surface.call` returns
    the `NeedsInput` the asker gave, and the tool does not run."""
    danger_log = tmp_path / "danger.log"
    surface = asking_surface(home, danger_log)
    pending = NeedsInput({"q": {"method": "elicitation/create", "params": {}}})

    class Unanswered:
        """A client channel whose user can only answer on a later request."""

        def __init__(self) -> None:
            self.ask_user = self._ask

        async def _ask(self, message: str) -> bool | NeedsInput:
            return pending

        async def call_upstream(self, *args: Any) -> dict[str, Any]:
            raise AssertionError("no upstream in this test")

    with trio.fail_after(30):
        outcome = await surface.call("toolfunnel_run_tool", {"name": "danger", "args": {}},
                                     CallContext("s", "1", Unanswered()))
    assert outcome is pending and not danger_log.exists()


# --------------------------------------------------------------------------- an upstream's not-found


class NotFoundUpstream:
    """An upstream that answers every read with a not-found error naming its own URI."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.asked: list[str] = []

    async def request(self, upstream_id: str, method: str, params: dict[str, Any], *,
                      log_level: str | None = None,
                      on_progress: Callable[[dict[str, Any]], None] | None = None,
                      legacy_client: bool = False) -> dict[str, Any]:
        self.asked.append(params["uri"])
        raise UpstreamRemoteError("not found", code=self.code, remote_message="Unknown resource",
                                  data={"uri": params["uri"], "secret": "upstream's own"})


LISTED = {"uri": "test://listed", "name": "listed"}


@pytest.mark.parametrize("code", [RESOURCE_NOT_FOUND, INVALID_PARAMS])
@pytest.mark.parametrize(("extras", "uri", "forwarded"), [
    # one upstream serves resources: a URI no list names goes to it as written
    (Extras.assemble({}, {"a": [LISTED]}, {}, ["a"]), "test://nonexistent", "test://nonexistent"),
    # the qualified form: the upstream is asked for its own URI
    (Extras.assemble({}, {"a": [LISTED], "b": [LISTED]}, {}, ["a", "b"]), qualified("b", "test://gone"),
     "test://gone"),
], ids=["unlisted", "qualified"])
@pytest.mark.parametrize("era", BOTH)
async def test_an_upstream_not_found_names_the_uri_the_client_asked_for(
        tmp_path: Path, code: int, extras: Extras, uri: str, forwarded: str, era: Era) -> None:
    """SEP-2164: a read of a resource the upstream does not have is an error whose `data.uri` is
    the client's URI (not the upstream's, and none of the upstream's other `data`)."""
    upstream = NotFoundUpstream(code)
    catalog = Catalog(Register(), ToolState(), extras=extras)
    reads = Reads(lambda: catalog, lambda: AllowAll(), upstream, AuditLog(tmp_path))
    tools: Any = FakeTools()
    gateway = Router(lambda: Settings(), tools, NoHooks(), AuditLog(tmp_path), reads=reads)
    params: dict[str, Any] = {"uri": uri, **({"_meta": META} if era is Era.MODERN else {})}
    with trio.fail_after(10), pytest.raises(ProtocolError) as raised:
        await gateway.handle(ClientSession("s"), Request(1, "resources/read", params), era=era)
    assert upstream.asked == [forwarded]
    assert raised.value.code == (INVALID_PARAMS if era is Era.MODERN else code)
    assert raised.value.data == {"uri": uri}
