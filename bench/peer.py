"""A minimal NDJSON JSON-RPC client for a stdio MCP peer, and the process lifecycle around it.

Hand-written on purpose, not the `mcp` SDK: a call costs one `json.dumps`, one pipe write, one
`json.loads` of the answer and one `trio.Event`, so the client stays small next to what it
measures. Requests the peer sends us are ignored (none of the measured paths sends any).

`running(argv)` starts the peer in its own session and guarantees, however the block ends, that
the peer, its process group and every descendant it started (tfunnel puts each upstream in a
group of its own) are killed and reaped.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

JSON = dict[str, Any]

READ_CHUNK = 65536
# After stdin EOF a peer gets this long to exit by itself (tfunnel stops its upstreams then)
# before its group and descendants are SIGKILLed.
STOP_GRACE_S = 2.0
STDERR_TAIL = 16 * 1024  # bytes of a peer's stderr kept for error messages
PROTOCOL_VERSION = "2025-06-18"


class PeerError(Exception):
    """The peer answered with a JSON-RPC error or an `isError` tool result, or went away."""


class _Pending:
    __slots__ = ("done", "reply")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.reply: JSON = {}


class Peer:
    """One stdio peer: `request` from any number of tasks; one reader task routes the answers."""

    def __init__(self, proc: trio.Process) -> None:
        self.proc = proc
        self.stderr_tail = bytearray()
        self._next_id = 0
        self._waiting: dict[int, _Pending] = {}
        self._send_lock = trio.StrictFIFOLock()  # concurrent send_all on one stream is an error
        self._list_changed = trio.Event()
        self._closed = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def request(self, method: str, params: Mapping[str, Any] | None = None) -> JSON:
        """Send one request and wait for its answer; raise `PeerError` on an error answer."""
        self._next_id += 1
        request_id = self._next_id
        pending = self._waiting[request_id] = _Pending()
        message: JSON = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self._send(message)
        await pending.done.wait()
        reply = pending.reply
        if "result" not in reply:
            raise PeerError(f"{method} failed: {reply.get('error')}{self._stderr_note()}")
        result: JSON = reply["result"]
        return result

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        message: JSON = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._send(message)

    async def call_tool(self, params: Mapping[str, Any]) -> JSON:
        """`tools/call` with ready-made params; an `isError` result raises `PeerError`."""
        result = await self.request("tools/call", params)
        if result.get("isError"):
            raise PeerError(f"tool error: {result.get('content')}")
        return result

    async def initialize(self) -> JSON:
        result = await self.request("initialize", {
            "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": {"name": "tfunnel-bench", "version": "1"}})
        await self.notify("notifications/initialized")
        return result

    async def wait_for_tool(self, name: str, poll_s: float = 0.05) -> None:
        """List tools until `name` is among them, re-listing on `tools/list_changed`.

        `poll_s` is only a safety net for a peer that never announces the change.
        """
        while True:
            changed = self._list_changed = trio.Event()  # armed before listing: no change is missed
            result = await self.request("tools/list")
            if any(tool.get("name") == name for tool in result.get("tools", [])):
                return
            with trio.move_on_after(poll_s):
                await changed.wait()

    async def _send(self, message: JSON) -> None:
        if self._closed:
            raise PeerError(f"peer closed its stdout{self._stderr_note()}")
        assert self.proc.stdin is not None
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        async with self._send_lock:
            await self.proc.stdin.send_all(data)

    async def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        pending = b""
        try:
            while chunk := await self.proc.stdout.receive_some(READ_CHUNK):
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                for line in lines:
                    if line.strip():
                        self._dispatch(json.loads(line))
        finally:
            self._closed = True
            for waiter in self._waiting.values():
                waiter.reply = {"error": "peer closed its stdout"}
                waiter.done.set()
            self._waiting.clear()

    def _dispatch(self, message: JSON) -> None:
        if "method" not in message:
            request_id = message.get("id")
            waiter = self._waiting.pop(request_id, None) if isinstance(request_id, int) else None
            if waiter is not None:
                waiter.reply = message
                waiter.done.set()
        elif message["method"] == "notifications/tools/list_changed":
            self._list_changed.set()

    async def _drain_stderr(self) -> None:
        # Always read stderr: a peer that logs into a full pipe would stall and skew the numbers.
        assert self.proc.stderr is not None
        while chunk := await self.proc.stderr.receive_some(READ_CHUNK):
            self.stderr_tail += chunk
            del self.stderr_tail[:-STDERR_TAIL]

    def _stderr_note(self) -> str:
        tail = self.stderr_tail.decode(errors="replace").strip()
        return f"\n--- peer stderr (tail) ---\n{tail}" if tail else ""


@contextlib.asynccontextmanager
async def running(argv: Sequence[str], env: Mapping[str, str] | None = None,
                  grace_s: float = STOP_GRACE_S) -> AsyncIterator[Peer]:
    """A started peer; on exit it is stopped (stdin EOF, `grace_s`, SIGKILL of groups) and reaped."""
    proc = await trio.lowlevel.open_process(
        list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=None if env is None else dict(env), start_new_session=True)
    peer = Peer(proc)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(peer._read_stdout)
            nursery.start_soon(peer._drain_stderr)
            try:
                yield peer
            finally:
                with trio.CancelScope(shield=True):
                    # The readers may not have seen the end of their pipes yet: they are stopped
                    # before the pipes are closed (a read of a closed pipe raises).
                    await stop(proc, grace_s, close_pipes=False)
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await stop(proc, grace_s)  # the pipes; and the rest, in case starting the readers failed


async def stop(proc: trio.Process, grace_s: float = STOP_GRACE_S, close_pipes: bool = True) -> None:
    """Close stdin, give the peer `grace_s` to exit, then SIGKILL what is left; reap it; close its
    output pipes (with `close_pipes`)."""
    family = descendants(proc.pid)  # now: once the peer exits, its children are reparented
    if proc.stdin is not None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await proc.stdin.aclose()
    with trio.move_on_after(grace_s):
        await proc.wait()
    kill_tree(proc.pid, family)
    await proc.wait()
    for stream in (proc.stdout, proc.stderr) if close_pipes else ():
        if stream is not None:
            await stream.aclose()


def kill_tree(leader: int, family: Sequence[int]) -> None:
    """SIGKILL the group led by `leader` and the groups of `family` (never our own group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, signal.SIGKILL)
    ours = os.getpgrp()
    for pid in family:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group == ours:
                os.kill(pid, signal.SIGKILL)
            else:
                os.killpg(group, signal.SIGKILL)


def descendants(root: int) -> list[int]:
    """Every live process below `root`, from the parent links in /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        # Field 4 is the parent pid; the command name in field 2 may contain spaces and ')'.
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found: list[int] = []
    queue = [root]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def rss_kib(pid: int) -> int:
    """VmRSS of `pid` in KiB, from /proc/<pid>/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise PeerError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time `pid` has used, from /proc/<pid>/stat (clock-tick resolution)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # After the ")" that ends the command name, utime and stime are the 12th and 13th fields.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def io_counters(pid: int) -> dict[str, int]:
    """/proc/<pid>/io: rchar, wchar, syscr, syscw, read_bytes (storage), write_bytes (storage), ..."""
    counters: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        key, _, value = line.partition(":")
        counters[key] = int(value)
    return counters
