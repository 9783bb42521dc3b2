"""A scripted in-memory upstream transport: supervisor and session tests without a process.

`ScriptedTransport` is an `UpstreamTransport` (`tfunnel.upstream.transport`) whose every
`connect()` starts a small legacy-era MCP server on memory channels, playing the next `Script`
(the last one repeats): it answers `initialize`, `tools/list` and `tools/call` from the script,
refuses `server/discover` (so the handshake falls back to `initialize`), and can refuse to start,
exit on its own after a while (with a status, or only closing its output), exit in the middle of
a call, never answer, and — driven by the test through `transport.server` — send notifications
and server→client requests. Everything runs on trio time, so under `MockClock` every delay a
test asserts is exact.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from tfunnel.errors import UpstreamError
from tfunnel.protocol.eras import LATEST_LEGACY, LEGACY_VERSIONS
from tfunnel.upstream.stdio import EXIT_READ_GRACE_S
from tfunnel.upstream.transport import MessageStream, Received, SpawnFailed

# list method -> (the Script field, the result key)
_LISTS = {"prompts/list": ("prompts", "prompts"), "resources/list": ("resources", "resources"),
          "resources/templates/list": ("templates", "resourceTemplates")}
ECHO = {"name": "echo", "description": "Echo the arguments as JSON text.", "inputSchema": {"type": "object"}}


@dataclass(frozen=True)
class Script:
    """What one incarnation of the scripted upstream does."""

    tools: tuple[Mapping[str, Any], ...] = (ECHO,)
    refuse: SpawnFailed | None = None  # `connect()` raises this instead of starting
    # It exits on its own this long after it first answered tools/list (the gateway's upstream is
    # ready from then on: 0 means it connects, then exits at once).
    exit_after_s: float = math.inf
    status: int | None = 1  # its exit status whenever it exits (None: it only closes its output)
    # Methods (e.g. "initialize") or tools whose request makes it exit at once, unanswered.
    crash_on: frozenset[str] = frozenset()
    # tool -> how long its call takes before it is answered (inf: never)
    delays: Mapping[str, float] = field(default_factory=dict)
    silent: frozenset[str] = frozenset()  # methods it never answers (e.g. "initialize")
    protocol_version: str | None = None  # what initialize answers (default: echo a legacy version)
    stderr: str = ""  # what its stderr tail says
    # Prompts, resources and templates it lists (each capability declared when there are any,
    # `resources` also for templates), `page_size` items per page (0: one page); `subscribe` and
    # `logging` declare those, answered `{}`.
    prompts: tuple[Mapping[str, Any], ...] = ()
    resources: tuple[Mapping[str, Any], ...] = ()
    templates: tuple[Mapping[str, Any], ...] = ()
    page_size: int = 0
    subscribe: bool = False
    logging: bool = False

    def capabilities(self) -> dict[str, Any]:
        declared: dict[str, Any] = {"tools": {"listChanged": True}}
        if self.prompts:
            declared["prompts"] = {"listChanged": True}
        if self.resources or self.templates or self.subscribe:
            declared["resources"] = {"listChanged": True, **({"subscribe": True} if self.subscribe else {})}
        if self.logging:
            declared["logging"] = {}
        return declared


class ScriptedServer:
    """The server side of one scripted incarnation; tests drive it through `transport.server`."""

    def __init__(self, script: Script, number: int) -> None:
        self.script = script
        self.number = number
        self.tools = tuple(script.tools)
        self.received: list[dict[str, Any]] = []  # every message the gateway sent, decoded
        self._to_server_send, self._to_server = trio.open_memory_channel[bytes](math.inf)
        self._to_client, self._to_client_receive = trio.open_memory_channel[bytes](math.inf)
        self._calls: dict[Any, trio.CancelScope] = {}
        self._asked: dict[str, trio.MemorySendChannel[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self.status: int | None = None
        self._listed = False
        self.exited = trio.Event()
        self.reading = True  # False: it takes no more input (a helper holds its full stdin pipe)
        self._stop = trio.CancelScope()
        self.stream = ScriptedStream(self)

    # -- what the test does --------------------------------------------------------------------

    def exit(self, status: int | None) -> None:
        """Exit now with `status` (None: only close the output), answering nothing more."""
        if not self.exited.is_set():
            self.status = status
            self.exited.set()
            self._to_client.close()
            self._stop.cancel()

    def stop_reading(self) -> None:
        """Take no more input from now on: the gateway's writes to it wait, as on a full pipe."""
        self.reading = False

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        await self._write({"method": method, **({"params": dict(params)} if params is not None else {})})

    async def request(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """Ask the gateway (a server→client request); its answer: `{"result": ...}` or `{"error": ...}`."""
        request_id = f"s-{next(self._ids)}"
        send, receive = trio.open_memory_channel[dict[str, Any]](1)
        self._asked[request_id] = send
        await self._write({"id": request_id, "method": method, "params": dict(params)})
        return await receive.receive()

    # -- the server ------------------------------------------------------------------------------

    async def serve(self) -> None:
        with self._stop:
            async with trio.open_nursery() as nursery:
                async for data in self._to_server:
                    message: dict[str, Any] = json.loads(data)
                    self.received.append(message)
                    await self._dispatch(message, nursery)
                # The gateway closed our input: a well-behaved server exits 0.
                self.exit(0)

    async def _exit_later(self) -> None:
        await trio.sleep(self.script.exit_after_s)
        self.exit(self.script.status)

    async def _dispatch(self, message: dict[str, Any], nursery: trio.Nursery) -> None:
        method, request_id = message.get("method"), message.get("id")
        if method is None:  # an answer to one of our requests
            asked = self._asked.pop(str(request_id), None)
            if asked is not None:
                asked.send_nowait({k: v for k, v in message.items() if k in ("result", "error")})
            return
        params = message.get("params") or {}
        if method == "notifications/cancelled":
            scope = self._calls.pop(params.get("requestId"), None)
            if scope is not None:
                scope.cancel()
        if request_id is None or method in self.script.silent:
            return
        if method in self.script.crash_on:
            self.exit(self.script.status)
            return
        if method == "initialize":
            offered = params.get("protocolVersion")
            echoed = offered if offered in LEGACY_VERSIONS else LATEST_LEGACY
            version = self.script.protocol_version or echoed
            await self._answer(request_id, {
                "protocolVersion": version, "capabilities": self.script.capabilities(),
                "serverInfo": {"name": "scripted", "version": str(self.number)}})
        elif method == "tools/list":
            await self._answer(request_id, {"tools": [dict(t) for t in self.tools]})
            if not self._listed and self.script.exit_after_s < math.inf:
                nursery.start_soon(self._exit_later)
            self._listed = True
        elif method == "tools/call":
            name = str(params.get("name"))
            if name in self.script.crash_on:
                self.exit(self.script.status)
                return
            scope = self._calls[request_id] = trio.CancelScope()
            nursery.start_soon(self._call, request_id, name, params.get("arguments") or {}, scope)
        elif method in _LISTS and getattr(self.script, _LISTS[method][0]):
            attribute, key = _LISTS[method]
            await self._answer(request_id, self._page(key, getattr(self.script, attribute), params))
        elif method == "ping" or (method in ("resources/subscribe", "resources/unsubscribe")
                                  and self.script.subscribe) \
                or (method == "logging/setLevel" and self.script.logging):
            await self._answer(request_id, {})
        else:
            await self._error(request_id, -32601, f"Method not found: {method}")

    def _page(self, key: str, items: tuple[Mapping[str, Any], ...],
              params: Mapping[str, Any]) -> dict[str, Any]:
        size = self.script.page_size or len(items) or 1
        start = int(params.get("cursor") or 0)
        page: dict[str, Any] = {key: [dict(item) for item in items[start:start + size]]}
        if start + size < len(items):
            page["nextCursor"] = str(start + size)
        return page

    async def _call(self, request_id: Any, name: str, arguments: Any, scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep(self.script.delays.get(name, 0.0))
            self._calls.pop(request_id, None)
            if name not in {t.get("name") for t in self.tools}:
                await self._error(request_id, -32602, f"Unknown tool: {name}")
                return
            await self._answer(request_id, {"content": [{"type": "text", "text": json.dumps(arguments,
                                                                                            sort_keys=True)}]})

    async def _answer(self, request_id: Any, result: dict[str, Any]) -> None:
        await self._write({"id": request_id, "result": result})

    async def _error(self, request_id: Any, code: int, message: str) -> None:
        await self._write({"id": request_id, "error": {"code": code, "message": message}})

    async def _write(self, message: dict[str, Any]) -> None:
        if self.exited.is_set():
            return
        self._to_client.send_nowait(json.dumps({"jsonrpc": "2.0", **message}).encode())


class ScriptedStream:
    """The gateway's side of one scripted incarnation (a `MessageStream`)."""

    def __init__(self, server: ScriptedServer) -> None:
        self._server = server

    @property
    def pid(self) -> int | None:
        return None

    @property
    def peer(self) -> str:
        return f"scripted #{self._server.number}"

    async def send(self, message: bytes) -> None:
        await trio.lowlevel.checkpoint()
        if not self._server.reading:
            await trio.sleep_forever()
        if self._server.exited.is_set():  # like a dead child's stdin
            raise UpstreamError(f"scripted upstream #{self._server.number} is not reading its input")
        try:
            self._server._to_server_send.send_nowait(message)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise UpstreamError(f"scripted upstream #{self._server.number} is not reading its input") from exc

    async def receive(self) -> Received | None:
        try:
            return await self._server._to_client_receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return None

    async def wait_ended(self) -> None:
        await self._server.exited.wait()
        await trio.sleep(EXIT_READ_GRACE_S)

    async def wait_closed(self) -> str:
        await self._server.exited.wait()
        status = self._server.status
        return f"exited with status {status}" if status is not None else "closed its output"

    def stderr_tail(self) -> str:
        return self._server.script.stderr

    def close_input(self) -> None:
        self._server._to_server_send.close()


class ScriptedTransport:
    """An `UpstreamTransport` playing `scripts` in turn, one per `connect()` (the last repeats).

    Records when each connection was made (`connects`) and closed (`closes`), and how many were
    ever open at once (`most_open`: 1 means no incarnation overlapped the one before)."""

    def __init__(self, *scripts: Script) -> None:
        self.scripts = scripts or (Script(),)
        self.connects: list[float] = []
        self.closes: list[float] = []
        self.servers: list[ScriptedServer] = []
        self.server: ScriptedServer | None = None  # the live incarnation's server
        self.open = 0
        self.most_open = 0

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[MessageStream]:
        n = len(self.connects)
        script = self.scripts[min(n, len(self.scripts) - 1)]
        self.connects.append(trio.current_time())
        if script.refuse is not None:
            raise script.refuse
        server = ScriptedServer(script, n + 1)
        self.servers.append(server)
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(server.serve)
                self.server = server
                yield server.stream
                nursery.cancel_scope.cancel()
        finally:
            server.stream.close_input()
            server.exit(0)  # no-op when it exited already
            self.server = None
            self.open -= 1
            self.closes.append(trio.current_time())
