"""A small Streamable HTTP client for `tfunnel serve --http`, and the process lifecycle around it.

The client is `httpx2.AsyncClient` with a keep-alive pool as deep as the highest concurrency the
harness uses, so every call after the first few reuses an open connection. One call is one
`json.dumps`, one `POST /mcp` and one `json.loads` of the plain JSON answer (no `progressToken`,
so no SSE). The client speaks one of three eras:

- `legacy`: `initialize`, then the `mcp-session-id` it answered and `mcp-protocol-version:
  2025-11-25` on every request, and `notifications/initialized` (202);
- `modern` (2026-07-28, stateless): no `initialize` and no session; every request carries the
  per-request `_meta` (`io.modelcontextprotocol/protocolVersion`, `clientCapabilities`,
  `clientInfo`) and the headers `mcp-protocol-version: 2026-07-28`, `mcp-method` and, for
  `tools/call`, `mcp-name`; it opens with `server/discover`;
- `plain`: for `bench/http_relay.py`, which keeps no sessions: `initialize` is forwarded to the
  upstream, and no session id is expected.

Unlike the stdio peers, a call that fails does not raise: the harness counts it (HTTP status other
than 200, JSON-RPC error, `isError` result, transport error or timeout) and keeps going, so one bad
answer shows up in the report instead of ending the run. Only the set-up calls (`initialize`,
`tools/list`, the first echo) raise `PeerError`.

`running_http(argv)` starts the gateway in its own session, waits for its `"listening"` log line
(the URL comes from it) and guarantees, however the block ends, that the gateway, its process
group and every descendant (tfunnel puts each upstream in a group of its own) are killed and
reaped. The gateway does not watch stdin, so it is stopped with SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx2
import trio
from peer import PROTOCOL_VERSION, READ_CHUNK, STDERR_TAIL, PeerError, descendants, kill_tree

JSON = dict[str, Any]

LISTEN_TIMEOUT_S = 30.0  # spawn to the "listening" log line
STOP_GRACE_S = 2.0  # SIGTERM to SIGKILL
# A call slower than this is reported as a stall (it still counts in the latencies).
STALL_S = 1.0
CALL_TIMEOUT_S = 30.0  # a call that takes longer fails with a timeout (and is counted)
SESSION_PROTOCOL = "2025-11-25"  # the mcp-protocol-version header sent after initialize
MODERN_PROTOCOL = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN_PROTOCOL,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "tfunnel-bench", "version": "1"},
}
ERAS = ("legacy", "modern", "plain")
BASE_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
PROBLEM_LEVELS = frozenset({"warning", "error", "critical", "exception"})
PROBLEMS_KEPT = 20  # gateway log lines of a problem level kept verbatim


class HttpPeer:
    """One HTTP gateway: `call_tool` from any number of tasks, over a shared keep-alive pool."""

    def __init__(self, proc: trio.Process, pool_size: int, era: str = "legacy") -> None:
        if era not in ERAS:
            raise ValueError(f"era must be one of {ERAS}, not {era!r}")
        self.proc = proc
        self.pool_size = pool_size
        self.era = era
        self.url = ""
        self.stderr_tail = bytearray()
        self.log_levels: Counter[str] = Counter()  # gateway log lines by level
        self.log_problems: list[str] = []  # the first warning/error lines, verbatim
        self.statuses: Counter[int] = Counter()  # HTTP status of every tools/call POST
        self.failures: Counter[str] = Counter()  # failed calls by kind
        self.failure_examples: list[str] = []
        self.stalls = 0  # calls slower than STALL_S
        # Every connection a tools/call went over (strong references: ids stay unique), to show
        # that keep-alive holds: the count should stay at the pool size.
        self._streams: dict[int, object] = {}
        self.slowest_s = 0.0
        self._listening = trio.Event()
        self._headers = dict(BASE_HEADERS)
        self._next_id = 0
        self._client: httpx2.AsyncClient | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def client(self) -> httpx2.AsyncClient:
        if self._client is None:
            raise PeerError("the HTTP client is not open")
        return self._client

    def open_client(self) -> httpx2.AsyncClient:
        limits = httpx2.Limits(max_connections=self.pool_size, max_keepalive_connections=self.pool_size,
                               keepalive_expiry=20.0)  # hypercorn closes idle connections at 30 s
        self._client = httpx2.AsyncClient(base_url=self.url, limits=limits, timeout=CALL_TIMEOUT_S,
                                          trust_env=False)
        return self._client

    # --- set-up calls: these raise -----------------------------------------------------------

    async def initialize(self) -> JSON:
        """Open the way the era does: `initialize` (legacy, plain) or `server/discover` (modern)."""
        if self.era == "modern":
            self._headers["mcp-protocol-version"] = MODERN_PROTOCOL
            return await self.request("server/discover")
        response = await self._post({"jsonrpc": "2.0", "id": self._new_id(), "method": "initialize",
                                     "params": {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                                                "clientInfo": {"name": "tfunnel-bench", "version": "1"}}})
        result = self._result("initialize", response)
        session_id = response.headers.get("mcp-session-id")
        if self.era == "plain":
            await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})
            return result
        if not session_id:
            raise PeerError(f"initialize answered without an mcp-session-id header{self._stderr_note()}")
        self._headers["mcp-session-id"] = session_id
        self._headers["mcp-protocol-version"] = SESSION_PROTOCOL
        response = await self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        if response.status_code != 202:
            raise PeerError(f"notifications/initialized answered {response.status_code}: {response.text!r}")
        return result

    async def request(self, method: str, params: Mapping[str, Any] | None = None) -> JSON:
        message: JSON = {"jsonrpc": "2.0", "id": self._new_id(), "method": method}
        if params is not None:
            message["params"] = params
        return self._result(method, await self._post(message))

    async def wait_for_tool(self, name: str, poll_s: float = 0.05) -> None:
        """List tools until `name` is among them (no GET stream: a short poll instead)."""
        while True:
            result = await self.request("tools/list")
            if any(tool.get("name") == name for tool in result.get("tools", [])):
                return
            await trio.sleep(poll_s)

    # --- measured calls: these count failures instead of raising --------------------------------

    async def call_tool(self, params: Mapping[str, Any]) -> bool:
        """One `tools/call`; True when it answered 200 with a result that is not `isError`."""
        message = {"jsonrpc": "2.0", "id": self._new_id(), "method": "tools/call", "params": params}
        started = time.perf_counter()
        try:
            response = await self._post(message)
            self.statuses[response.status_code] += 1
            stream = response.extensions.get("network_stream")
            self._streams.setdefault(id(stream), stream)
        except httpx2.TimeoutException as exc:
            return self._failed("timeout", repr(exc))
        except httpx2.HTTPError as exc:
            return self._failed("transport", repr(exc))
        finally:
            elapsed = time.perf_counter() - started
            self.slowest_s = max(self.slowest_s, elapsed)
            if elapsed > STALL_S:
                self.stalls += 1
        if response.status_code != 200:
            return self._failed(f"status {response.status_code}", response.text[:300])
        try:
            reply = json.loads(response.content)
        except ValueError:
            return self._failed("not JSON", f"{response.headers.get('content-type')}: {response.text[:300]}")
        if "result" not in reply:
            return self._failed("JSON-RPC error", repr(reply.get("error")))
        if reply["result"].get("isError"):
            return self._failed("isError", repr(reply["result"].get("content")))
        return True

    def connections(self) -> int:
        """Connections the measured calls went over (warm-up included)."""
        return len(self._streams)

    def failed_calls(self) -> int:
        return sum(self.failures.values())

    # --- internals ---------------------------------------------------------------------------

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    async def _post(self, message: JSON) -> httpx2.Response:
        headers = self._headers
        if self.era == "modern" and "id" in message:
            params = message["params"] = dict(message.get("params") or {})
            params["_meta"] = {**params.get("_meta", {}), **MODERN_META}
            headers = {**headers, "mcp-method": message["method"]}
            if message["method"] == "tools/call":
                headers["mcp-name"] = params["name"]
        data = json.dumps(message, separators=(",", ":")).encode()
        return await self.client.post("/mcp", content=data, headers=headers)

    def _result(self, method: str, response: httpx2.Response) -> JSON:
        if response.status_code != 200:
            raise PeerError(f"{method} answered HTTP {response.status_code}: {response.text[:500]!r}"
                            f"{self._stderr_note()}")
        reply = json.loads(response.content)
        if "result" not in reply:
            raise PeerError(f"{method} failed: {reply.get('error')}{self._stderr_note()}")
        result: JSON = reply["result"]
        return result

    def _failed(self, kind: str, detail: str) -> bool:
        self.failures[kind] += 1
        if len(self.failure_examples) < PROBLEMS_KEPT:
            self.failure_examples.append(f"{kind}: {detail}")
        return False

    async def _read_stderr(self) -> None:
        # Always read stderr (a full pipe would stall the gateway); the URL comes from the
        # "listening" line, and every line's level is tallied so gateway warnings get reported.
        assert self.proc.stderr is not None
        pending = b""
        while chunk := await self.proc.stderr.receive_some(READ_CHUNK):
            self.stderr_tail += chunk
            del self.stderr_tail[:-STDERR_TAIL]
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                self._log_line(line.decode(errors="replace").strip())

    def _log_line(self, line: str) -> None:
        if not line.startswith("{"):
            return  # e.g. "tfunnel: config home ..."
        try:
            record = json.loads(line)
        except ValueError:
            return
        level = str(record.get("level", "?"))
        self.log_levels[level] += 1
        if level in PROBLEM_LEVELS and len(self.log_problems) < PROBLEMS_KEPT:
            self.log_problems.append(line)
        if record.get("event") == "listening" and not self._listening.is_set():
            urls = record.get("urls") or []
            if urls:
                self.url = str(urls[0])
                self._listening.set()

    def _stderr_note(self) -> str:
        tail = self.stderr_tail.decode(errors="replace").strip()
        return f"\n--- gateway stderr (tail) ---\n{tail}" if tail else ""


@contextlib.asynccontextmanager
async def running_http(argv: Sequence[str], pool_size: int, grace_s: float = STOP_GRACE_S,
                       era: str = "legacy") -> AsyncIterator[HttpPeer]:
    """A listening HTTP gateway with an open client; on exit it is stopped (SIGTERM, `grace_s`,
    SIGKILL of its group and its descendants' groups) and reaped."""
    proc = await trio.lowlevel.open_process(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True)
    peer = HttpPeer(proc, pool_size, era)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(peer._read_stderr)
            try:
                with trio.move_on_after(LISTEN_TIMEOUT_S):
                    async with trio.open_nursery() as wait:
                        wait.start_soon(_cancel_when_exited, proc, wait.cancel_scope)
                        await peer._listening.wait()
                        wait.cancel_scope.cancel()
                if not peer._listening.is_set():
                    raise PeerError(f"the HTTP gateway did not report listening (exit status "
                                    f"{proc.returncode}){peer._stderr_note()}")
                async with peer.open_client():
                    yield peer
            finally:
                with trio.CancelScope(shield=True):
                    # The stderr reader may still be reading (a child of the server can hold the
                    # pipe until the SIGKILL): stop it before the pipe is closed, below.
                    await stop_http(proc, grace_s, close_stderr=False)
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await stop_http(proc, grace_s)  # again, in case starting the reader failed; a no-op otherwise


async def _cancel_when_exited(proc: trio.Process, scope: trio.CancelScope) -> None:
    await proc.wait()
    scope.cancel()


async def stop_http(proc: trio.Process, grace_s: float = STOP_GRACE_S, close_stderr: bool = True) -> None:
    """SIGTERM the gateway, give it `grace_s` to drain and exit, SIGKILL what is left; reap it."""
    family = descendants(proc.pid)  # now: once the gateway exits, its children are reparented
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with trio.move_on_after(grace_s):
            await proc.wait()
    kill_tree(proc.pid, family)
    await proc.wait()
    if close_stderr and proc.stderr is not None:
        await proc.stderr.aclose()
