"""The Streamable HTTP upstream transport: the seam's whole messages over POSTs, on one
`httpx2.AsyncClient` per incarnation (TLS verified, the expanded `headers` on every request).

`send()` POSTs one message. A request's POST runs in a task of its own (the session's timers
keep running while it waits): its JSON body, or each `message` event of its event stream, is a
message for `receive()`. A notification or a response is POSTed inline (202 expected).

Legacy session: the `Mcp-Session-Id` of the initialize answer and the negotiated
`MCP-Protocol-Version` go on every later request; after `notifications/initialized` a GET stream
carries the server's own messages, reopened with `Last-Event-ID` when it drops (405: the server
has none). A 404 on a request carrying the session means the session is gone: the stream ends and
the supervisor re-initializes. Closing DELETEs the session (bounded, best effort).

Modern requests (their `_meta` names the protocol version) carry `MCP-Protocol-Version`,
`Mcp-Method` and `Mcp-Name`, and a tools/call one `Mcp-Param-{Name}` per argument its tool's
`x-mcp-header` annotations name (the schema as a modern tools/list answered it); no session.
Their cancel is closing the response stream: a `notifications/cancelled` for an in-flight
modern request cancels that POST and is not sent.

Errors: nothing is sent before the handshake's first message, so `connect()` only refuses bad
headers; a request that cannot reach the server (refused, DNS, TLS) or whose connection breaks
ends the stream naming why; an HTTP error status answers that request with an error naming the
status. Header values and the URL's userinfo and query are never logged.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import structlog
import trio

from tfunnel.config.expose import UpstreamSpec
from tfunnel.errors import UpstreamError
from tfunnel.protocol import jsonrpc
from tfunnel.protocol.eras import PROTOCOL_VERSION_META
from tfunnel.protocol.headers import mirrored_params
from tfunnel.upstream.http_sse import SseDecoder
from tfunnel.upstream.remote import display_url, expand_headers
from tfunnel.upstream.states import Context
from tfunnel.upstream.transport import MessageStream, Received

log = structlog.get_logger("tfunnel.upstream")

ACCEPT_POST = "application/json, text/event-stream"
SESSION_HEADER = "Mcp-Session-Id"
VERSION_HEADER = "MCP-Protocol-Version"
# How often a dropped GET stream is reopened before we give up on it (a server that is gone
# then ends the stream, so the supervisor restarts), and the first pause (doubled each time).
GET_RETRIES = 3
GET_RETRY_S = 0.25
# The longest `retry:` a server may ask of us before reopening its GET stream.
MAX_RETRY_S = 5.0
# Ending the session on close must not hold up a stop.
DELETE_S = 2.0
# Messages received but not yet read by the session: the POST tasks wait beyond this.
INBOX = 64
_MCP_NAME_PARAM = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def header_value(value: str) -> str:
    """A value as an `Mcp-Name` header: as it is when plain header-safe ASCII, else the
    `=?base64?...?=` form the modern transport defines."""
    plain = value.isascii() and value.isprintable() and value == value.strip() and not (
        value.startswith("=?base64?") and value.endswith("?="))
    return value if plain else f"=?base64?{base64.b64encode(value.encode()).decode()}?="


def _why(exc: httpx2.HTTPError) -> str:
    """What went wrong, without the URL (some messages carry it)."""
    if isinstance(exc, httpx2.ConnectError):
        return "could not be reached (connection failed)"
    if isinstance(exc, httpx2.TimeoutException):
        return "could not be reached (timed out)"
    return f"closed the connection ({type(exc).__name__})"


class HttpStream:
    """One incarnation's `MessageStream` over HTTP (see the module docstring)."""

    def __init__(self, spec: UpstreamSpec, ctx: Context, client: httpx2.AsyncClient,
                 headers: Mapping[str, str], nursery: trio.Nursery) -> None:
        assert spec.url is not None
        self._id = spec.id
        self._url = spec.url
        self._peer = display_url(spec.url)
        self._max = ctx.limits.max_message_bytes
        self._client = client
        self._headers = dict(headers)
        self._nursery = nursery
        self._inbox_in, self._inbox = trio.open_memory_channel[bytes](INBOX)
        self._ended = trio.Event()
        self._reason = ""
        self.session_id: str | None = None
        self.protocol_version: str | None = None  # negotiated by a legacy initialize
        self._modern: dict[jsonrpc.RequestId, trio.CancelScope] = {}
        # Modern tools/list requests in flight, and what their answers taught: each tool's
        # inputSchema, whose `x-mcp-header` arguments a tools/call mirrors into Mcp-Param-*.
        self._listing: set[jsonrpc.RequestId] = set()
        self._schemas: dict[str, Mapping[str, Any]] = {}
        self._listening = False
        self._modern_only = False  # the last request was modern, and no legacy session exists

    @property
    def pid(self) -> int | None:
        return None

    @property
    def peer(self) -> str:
        return self._peer

    def stderr_tail(self) -> str:
        return ""

    async def receive(self) -> Received | None:
        try:
            return await self._inbox.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return None

    async def wait_ended(self) -> None:
        await self._ended.wait()

    async def wait_closed(self) -> str:
        return self._reason or "closed its stream"

    def end(self, reason: str, *, session_lost: bool = False) -> None:
        """End the stream (the first reason wins): `receive` returns None once the messages
        already received are read."""
        if session_lost:
            self.session_id = None  # nothing left to DELETE
        if self._ended.is_set():
            return
        self._reason = reason
        self._ended.set()
        self._inbox_in.close()
        log.info("upstream connection ended", upstream=self._id, peer=self._peer, reason=reason)

    async def send(self, message: bytes) -> None:
        if self._ended.is_set():
            raise UpstreamError(f"upstream {self._id!r} {self._reason}")
        body = message.rstrip(b"\n")
        parsed = json.loads(body)
        if not isinstance(parsed, dict):  # never from our session; POST it as it is
            await self._one_way(body, None)
            return
        method = parsed.get("method")
        if method is not None and "id" in parsed:
            modern = self._modern_headers(parsed)
            scope = trio.CancelScope()
            if modern is not None:
                self._modern[parsed["id"]] = scope
                if method == "tools/list":
                    self._listing.add(parsed["id"])
            self._modern_only = modern is not None and self.protocol_version is None
            self._nursery.start_soon(self._request, parsed, body, modern, scope)
            return
        if method == "notifications/cancelled":
            cancelled = (parsed.get("params") or {}).get("requestId")
            scope_or_none = self._modern.pop(cancelled, None) if isinstance(cancelled, (str, int)) else None
            if scope_or_none is not None:  # a modern request is cancelled by closing its stream
                scope_or_none.cancel()
                return
            if self._modern_only:  # a modern request that already ended: nothing to cancel
                return
        await self._one_way(body, method)

    # --- requests -------------------------------------------------------------------------

    def _modern_headers(self, request: Mapping[str, Any]) -> dict[str, str] | None:
        params = request.get("params")
        meta = params.get("_meta") if isinstance(params, Mapping) else None
        version = meta.get(PROTOCOL_VERSION_META) if isinstance(meta, Mapping) else None
        if not isinstance(version, str):
            return None
        method = str(request["method"])
        headers = {VERSION_HEADER: version, "Mcp-Method": method}
        name = params.get(_MCP_NAME_PARAM.get(method, "")) if isinstance(params, Mapping) else None
        if isinstance(name, str):
            headers["Mcp-Name"] = header_value(name)
        arguments = params.get("arguments") if isinstance(params, Mapping) else None
        if method == "tools/call" and isinstance(name, str) and isinstance(arguments, Mapping):
            schema = self._schemas.get(name)
            for param, text in (mirrored_params(schema, arguments) if schema else {}).items():
                headers[f"Mcp-Param-{param}"] = header_value(text)
        return headers

    def _session_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        if self.session_id is not None:
            headers[SESSION_HEADER] = self.session_id
        if self.protocol_version is not None:
            headers[VERSION_HEADER] = self.protocol_version
        return headers

    async def _request(self, request: dict[str, Any], body: bytes, modern: dict[str, str] | None,
                       scope: trio.CancelScope) -> None:
        request_id = request["id"]
        initialize = request["method"] == "initialize"
        extra = modern if modern is not None else ({} if initialize else self._session_headers())
        headers = {**self._headers, "Accept": ACCEPT_POST, "Content-Type": "application/json", **extra}
        try:
            with scope:
                async with self._client.stream("POST", self._url, content=body, headers=headers) as response:
                    await self._answer(response, request_id, initialize, SESSION_HEADER in extra)
        except httpx2.HTTPError as exc:
            self.end(_why(exc))
        finally:
            self._modern.pop(request_id, None)
            self._listing.discard(request_id)

    async def _answer(self, response: httpx2.Response, request_id: jsonrpc.RequestId, initialize: bool,
                      carried_session: bool) -> None:
        if response.status_code == 404 and carried_session:
            self.end("lost its session (404)", session_lost=True)
            return
        if response.status_code >= 400:
            body = await self._read(response)
            await self._deliver(self._status_error(request_id, response.status_code, body))
            return
        if initialize:
            self.session_id = response.headers.get(SESSION_HEADER)
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        answered: bool | None = False
        if kind == "text/event-stream":
            decoder = SseDecoder(self._max)
            answered = await self._events(response, decoder, request_id, initialize)
            if answered is False and carried_session and decoder.last_id is not None:
                # A legacy server may close a request's stream early (2025-11-25 polling): its
                # answer comes when we resume the stream, which is not a cancel.
                answered = await self._resume(request_id, decoder)
        elif kind == "application/json":
            data = await self._read(response)
            if data is None:
                await self._deliver(self._error(request_id, f"sent an answer over {self._max} bytes"))
                return
            answered = self._answers(data, request_id, initialize)
            await self._deliver(data)
        if answered is False:
            await self._deliver(self._error(
                request_id, f"ended the response (HTTP {response.status_code}) without an answer"))

    async def _events(self, response: httpx2.Response, decoder: SseDecoder, request_id: jsonrpc.RequestId,
                      initialize: bool = False) -> bool | None:
        """Deliver a request's stream of events: whether its answer came (None: refused as over
        the cap, an error answer already delivered)."""
        answered = False
        async for chunk in response.aiter_bytes():
            for event in decoder.feed(chunk):
                if event.oversize:
                    await self._deliver(self._error(request_id, f"sent an event over {self._max} bytes"))
                    return None
                if event.event == "message" and event.data:
                    answered = self._answers(event.data.encode(), request_id, initialize) or answered
                    await self._deliver(event.data.encode())
        return answered

    async def _resume(self, request_id: jsonrpc.RequestId, decoder: SseDecoder) -> bool | None:
        """Reopen a request's stream with GET and `Last-Event-ID` until its answer comes (bounded),
        after the stream's last `retry:` (capped), else a doubling pause."""
        for attempt in range(GET_RETRIES):
            hint = decoder.retry_ms
            await trio.sleep(GET_RETRY_S * 2 ** attempt if hint is None else min(hint / 1000, MAX_RETRY_S))
            assert decoder.last_id is not None
            headers = {**self._headers, "Accept": "text/event-stream", **self._session_headers(),
                       "Last-Event-ID": decoder.last_id}
            async with self._client.stream("GET", self._url, headers=headers) as response:
                if response.status_code != 200:
                    return False
                answered = await self._events(response, decoder, request_id)
                if answered is not False:
                    return answered
        return False

    def _answers(self, data: bytes, request_id: jsonrpc.RequestId, initialize: bool) -> bool:
        """Whether `data` answers the request; an initialize answer also names the version."""
        try:
            message = json.loads(data)
        except ValueError:
            return False
        if not isinstance(message, dict) or message.get("id") != request_id or "method" in message:
            return False
        result = message.get("result")
        if initialize and isinstance(result, dict) and isinstance(result.get("protocolVersion"), str):
            self.protocol_version = result["protocolVersion"]
        if request_id in self._listing and isinstance(result, dict) and isinstance(result.get("tools"), list):
            for tool in result["tools"]:
                if isinstance(tool, dict) and isinstance(tool.get("name"), str) \
                        and isinstance(tool.get("inputSchema"), dict):
                    self._schemas[tool["name"]] = tool["inputSchema"]
        return True

    async def _read(self, response: httpx2.Response) -> bytes | None:
        """The body, or None when it is over the message cap (not read further)."""
        data = bytearray()
        async for chunk in response.aiter_bytes():
            data += chunk
            if len(data) > self._max:
                return None
        return bytes(data)

    def _error(self, request_id: jsonrpc.RequestId, what: str, code: int = jsonrpc.INTERNAL_ERROR,
               data: Any = None) -> bytes:
        return jsonrpc.encode(jsonrpc.error_message(request_id, code, f"upstream {self._id!r} {what}", data))

    def _status_error(self, request_id: jsonrpc.RequestId, status: int, body: bytes | None) -> bytes:
        """The error answer for an HTTP error status: the body's JSON-RPC error code, message and
        data when it has one (era decisions key on the code, and a -32022 retry on
        `data.supported`), always naming the status."""
        code, detail, data = jsonrpc.INTERNAL_ERROR, "", None
        try:
            error = json.loads(body or b"").get("error")
        except (ValueError, AttributeError):
            error = None
        if isinstance(error, dict):
            if isinstance(error.get("code"), int) and not isinstance(error.get("code"), bool):
                code = error["code"]
            detail = f": {error.get('message', '')}"
            data = error.get("data")
        phrase = httpx2.codes.get_reason_phrase(status)
        return self._error(request_id, f"answered HTTP {status} {phrase}{detail}".rstrip(), code, data)

    async def _deliver(self, data: bytes) -> None:
        # Once the stream ended nobody reads any more: what arrives after is dropped.
        with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            await self._inbox_in.send(data)

    # --- notifications and responses ------------------------------------------------------

    async def _one_way(self, body: bytes, method: Any) -> None:
        extra = self._session_headers()
        headers = {**self._headers, "Accept": ACCEPT_POST, "Content-Type": "application/json", **extra}
        try:
            async with self._client.stream("POST", self._url, content=body, headers=headers) as response:
                status = response.status_code
                await self._read(response)
        except httpx2.HTTPError as exc:
            self.end(_why(exc))
            raise UpstreamError(f"upstream {self._id!r} {self._reason}") from exc
        if status == 404 and SESSION_HEADER in extra:
            self.end("lost its session (404)", session_lost=True)
            raise UpstreamError(f"upstream {self._id!r} {self._reason}")
        if status >= 400:
            raise UpstreamError(f"upstream {self._id!r} refused {method or 'a response'} with HTTP {status}")
        if method == "notifications/initialized" and not self._listening:
            self._listening = True
            self._nursery.start_soon(self._listen)

    # --- the GET stream ---------------------------------------------------------------------

    async def _listen(self) -> None:
        """The server's own messages (legacy): reopened with `Last-Event-ID` when it drops; a
        server that cannot be reached again ends the stream."""
        last_id: str | None = None
        failures, pause = 0, GET_RETRY_S
        while True:
            headers = {**self._headers, "Accept": "text/event-stream", **self._session_headers()}
            if last_id is not None:
                headers["Last-Event-ID"] = last_id
            decoder = SseDecoder(self._max)
            try:
                async with self._client.stream("GET", self._url, headers=headers) as response:
                    if response.status_code == 405:
                        log.debug("upstream has no GET stream", upstream=self._id)
                        return
                    if response.status_code == 404 and SESSION_HEADER in headers:
                        self.end("lost its session (404)", session_lost=True)
                        return
                    if response.status_code >= 400:
                        log.info("upstream refused its GET stream", upstream=self._id,
                                 status=response.status_code)
                        return
                    failures = 0
                    async for chunk in response.aiter_bytes():
                        for event in decoder.feed(chunk):
                            if event.retry_ms is not None:
                                pause = min(event.retry_ms / 1000, MAX_RETRY_S)
                            if event.oversize:
                                log.warning("upstream event over the message cap dropped", upstream=self._id,
                                            limit=self._max)
                            elif event.event == "message" and event.data:
                                await self._deliver(event.data.encode())
                reason = "closed its output"
            except httpx2.HTTPError as exc:
                reason = _why(exc)
            last_id = decoder.last_id or last_id
            failures += 1
            if failures > GET_RETRIES:
                self.end(reason)
                return
            log.debug("upstream GET stream dropped; reopening", upstream=self._id, reason=reason)
            await trio.sleep(pause * 2 ** (failures - 1))

    async def close(self) -> None:
        """End the legacy session (bounded, best effort; the caller shields it)."""
        if self.session_id is None:
            return
        headers = {**self._headers, **self._session_headers()}
        with trio.move_on_after(DELETE_S):
            try:
                await self._client.delete(self._url, headers=headers)
            except httpx2.HTTPError as exc:
                log.debug("upstream session not deleted", upstream=self._id, reason=_why(exc))


class HttpTransport:
    """Each `connect()` is one client (its own connection pool) for `spec.url`."""

    def __init__(self, spec: UpstreamSpec, ctx: Context) -> None:
        self._spec = spec
        self._ctx = ctx

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[MessageStream]:
        spec = self._spec
        headers = expand_headers(spec.id, spec.headers, self._ctx.env)
        control = spec.request_timeout_ms / 1000
        # Reads wait as long as the session lets them (its own timers cancel a call); connecting
        # and writing are bounded by the control window.
        timeout = httpx2.Timeout(connect=control, read=None, write=control, pool=None)
        limits = httpx2.Limits(max_connections=None, max_keepalive_connections=8)
        async with httpx2.AsyncClient(timeout=timeout, limits=limits, verify=True, trust_env=False,
                                      follow_redirects=False) as client:
            stream: HttpStream | None = None
            try:
                async with trio.open_nursery() as nursery:
                    stream = HttpStream(spec, self._ctx, client, headers, nursery)
                    yield stream
                    nursery.cancel_scope.cancel()
            finally:
                with trio.CancelScope(shield=True):
                    if stream is not None:
                        stream.end("was disconnected")
                        await stream.close()

