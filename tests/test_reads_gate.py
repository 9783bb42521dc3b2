"""Prompts and resources through the gate (`surface.reads`), with the real hook engine and hook
processes: a PreToolUse deny means the upstream never saw the request; a rewrite is what it sees."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.hooks import decision, set_hooks
from tests.test_route_methods import NoHooks
from tfunnel.config.model import Register, Settings, ToolState
from tfunnel.errors import ProtocolError, UpstreamRemoteError
from tfunnel.gate.engine import HookEngine
from tfunnel.gate.manifest import load_manifest
from tfunnel.observe.audit import AuditLog
from tfunnel.protocol.eras import Era
from tfunnel.protocol.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    POLICY_DENIED,
    RESOURCE_NOT_FOUND,
    Request,
)
from tfunnel.protocol.session import ClientSession
from tfunnel.route import Router
from tfunnel.route.modern import CONFIRM_PREFIX
from tfunnel.surface.catalog import Catalog
from tfunnel.surface.context import CallContext
from tfunnel.surface.reads import Reader, Reads, upstream_error
from tfunnel.surface.upstream_items import Extras

pytestmark = pytest.mark.timeout(60)

EXTRAS = Extras.assemble({"up": [{"name": "greet", "arguments": [{"name": "who"}]}]},
                         {"up": [{"uri": "file:///notes", "name": "notes"}]},
                         {"up": [{"uriTemplate": "doc://{id}", "name": "doc"}]}, ["up"])


class Recorder:
    """Upstreams that record every request they are sent and answer `answer`."""

    def __init__(self, answer: dict[str, Any] | Exception | None = None) -> None:
        self.seen: list[tuple[str, str, dict[str, Any]]] = []
        self.answer = answer

    async def request(self, upstream_id: str, method: str, params: dict[str, Any], *,
                      log_level: str | None = None,
                      on_progress: Callable[[dict[str, Any]], None] | None = None,
                      legacy_client: bool = False) -> dict[str, Any]:
        self.seen.append((upstream_id, method, params))
        if on_progress is not None:  # the upstream reports progress on the read
            on_progress({"progressToken": "ours", "progress": 1, "total": 2})
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer or {"messages": [], "contents": []}


def reads(home: Path, upstreams: Recorder) -> Reads:
    audit = AuditLog(home)
    gate = HookEngine(home, lambda: load_manifest(home), lambda: "deny", audit, dict(os.environ))
    catalog = Catalog(Register(), ToolState(), (), EXTRAS)
    return Reads(lambda: catalog, lambda: gate, upstreams, audit)


async def code_of(work: Any) -> int:
    with pytest.raises(ProtocolError) as caught:
        await work
    return caught.value.code


async def test_a_deny_on_prompt_or_resource_means_the_upstream_never_saw_it(home: Path) -> None:
    set_hooks(home, {"matcher": "(prompt|resource):.*", "command": decision("deny", "not today")})
    upstreams = Recorder()
    surface = reads(home, upstreams)
    with trio.fail_after(30):
        assert await code_of(surface.get_prompt({"name": "up_greet"}, Reader())) == POLICY_DENIED
        assert await code_of(surface.read_resource({"uri": "file:///notes"}, Reader())) == POLICY_DENIED
        assert await code_of(surface.read_resource({"uri": "doc://4"}, Reader())) == POLICY_DENIED
    assert upstreams.seen == []


async def test_a_tool_matcher_leaves_prompts_alone_and_the_upstream_sees_its_own_names(home: Path) -> None:
    set_hooks(home, {"matcher": "echo", "command": decision("deny", "no echo")})
    upstreams = Recorder()
    surface = reads(home, upstreams)
    with trio.fail_after(30):
        await surface.get_prompt({"name": "up_greet", "arguments": {"who": "x"}}, Reader())
        await surface.read_resource({"uri": "doc://4"}, Reader(meta={"trace": "t1"}))
    assert upstreams.seen == [("up", "prompts/get", {"name": "greet", "arguments": {"who": "x"}}),
                              ("up", "resources/read", {"uri": "doc://4", "_meta": {"trace": "t1"}})]


async def test_a_hooks_rewrite_is_what_the_upstream_gets_and_must_still_be_valid(home: Path) -> None:
    set_hooks(home, {"matcher": "prompt:up_greet",
                     "command": decision("allow", updatedInput={"who": "rewritten"})})
    upstreams = Recorder()
    surface = reads(home, upstreams)
    with trio.fail_after(30):
        await surface.get_prompt({"name": "up_greet", "arguments": {"who": "x"}}, Reader())
        assert upstreams.seen[-1][2]["arguments"] == {"who": "rewritten"}
        set_hooks(home, {"matcher": "prompt:.*", "command": decision("allow", updatedInput={"who": 5})})
        assert await code_of(surface.get_prompt({"name": "up_greet"}, Reader())) == INVALID_PARAMS
    assert len(upstreams.seen) == 1


async def test_upstream_errors_keep_their_code_only_when_it_means_the_same(home: Path) -> None:
    set_hooks(home)
    with trio.fail_after(30):
        for remote, ours in ((RESOURCE_NOT_FOUND, RESOURCE_NOT_FOUND), (INVALID_PARAMS, INVALID_PARAMS),
                             (-32042, INTERNAL_ERROR), (-32601, INTERNAL_ERROR), (12, 12)):
            error = UpstreamRemoteError("x", code=remote, remote_message="m")
            assert await code_of(reads(home, Recorder(error)).read_resource({"uri": "file:///notes"},
                                                                            Reader())) == ours


@pytest.mark.parametrize(("code", "kept"), [(-32002, -32002), (-32602, -32602), (-32603, -32603),
                                            (-32600, -32603), (-32020, -32603), (-32768, -32603),
                                            (-31999, -31999), (1, 1)])
def test_upstream_error_codes(code: int, kept: int) -> None:
    assert upstream_error(code, "m").code == kept


async def test_an_input_required_answer_to_a_read_is_an_error_not_passed_on(home: Path) -> None:
    set_hooks(home)
    surface = reads(home, Recorder({"resultType": "input_required", "requestState": "s"}))
    with trio.fail_after(30):
        assert await code_of(surface.get_prompt({"name": "up_greet"}, Reader())) == INTERNAL_ERROR


async def test_a_modern_readers_ask_is_an_mrtr_round_and_its_retry_reads(home: Path,
                                                                         tmp_path: Path) -> None:
    """A PreToolUse `ask` on prompts/get to a modern client that declared elicitation: the first
    round answers input_required and the upstream sees nothing; the retry with the accepted answer
    (and the sealed state) gets the prompt. A client without elicitation: the gate's
    askFallback (deny) decides at once."""
    set_hooks(home, {"matcher": "prompt:.*", "command": decision("ask", "Read it?")})
    upstreams = Recorder({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]})
    surface = reads(home, upstreams)
    tools: Any = NoTools()  # the table's view of the surface: no tools here
    gateway = Router(lambda: Settings(), tools, NoHooks(), AuditLog(tmp_path), reads=surface)
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
    params = {"name": "up_greet", "arguments": {"who": "x"}, "_meta": meta}
    with trio.fail_after(30):
        first = await gateway.handle(ClientSession("s"), Request(1, "prompts/get", params), era=Era.MODERN)
        assert first["resultType"] == "input_required" and upstreams.seen == []
        (key, question), = first["inputRequests"].items()
        assert key.startswith(CONFIRM_PREFIX) and question["params"]["message"].startswith("Read it?")
        retry = {**params, "requestState": first["requestState"],
                 "inputResponses": {key: {"action": "accept"}}}
        done = await gateway.handle(ClientSession("s"), Request(2, "prompts/get", retry), era=Era.MODERN)
        assert done["resultType"] == "complete" and done["messages"][0]["content"]["text"] == "hi"
        assert [method for _, method, _ in upstreams.seen] == ["prompts/get"]
        # The sealed state is bound to its request: echoed on other arguments, it is refused.
        forged = {**retry, "arguments": {"who": "y"}}
        with pytest.raises(ProtocolError):
            await gateway.handle(ClientSession("s"), Request(3, "prompts/get", forged), era=Era.MODERN)
        plain = {**params, "_meta": {**meta, "io.modelcontextprotocol/clientCapabilities": {}}}
        with pytest.raises(ProtocolError) as denied:
            await gateway.handle(ClientSession("s"), Request(4, "prompts/get", plain), era=Era.MODERN)
        assert denied.value.code == POLICY_DENIED
    assert len(upstreams.seen) == 1


class NoTools:
    def list_tools(self, ctx: CallContext | None = None) -> list[dict[str, Any]]:
        return []

    def instructed(self, ctx: CallContext, instructions: str) -> None:
        return None

    def end_session(self, session_id: str) -> None:
        return None

    def tool_schema(self, name: str, profile: Any = None) -> None:
        return None

    async def call(self, name: str, args: Any, ctx: Any) -> Any:
        raise AssertionError("no tool is called here")


async def test_an_upstreams_progress_on_a_read_reaches_the_reader(home: Path) -> None:
    set_hooks(home)
    seen: list[dict[str, Any]] = []
    surface = reads(home, Recorder())
    with trio.fail_after(30):
        await surface.read_resource({"uri": "file:///notes"}, Reader(progress=seen.append))
        await surface.get_prompt({"name": "up_greet"}, Reader())  # without a token: nothing to relay
    assert seen == [{"progressToken": "ours", "progress": 1, "total": 2}]
