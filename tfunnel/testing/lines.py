"""The client's side of a stdio gateway, whatever carries the bytes (memory streams in-process,
a child's pipes in `tests/wire.py`): messages sent as JSON lines, or with `framed` in
`Content-Length` frames (as ToolFunnel's clients send them); what the gateway writes read as JSON
lines either way (a line that is not JSON fails), with a stash for what arrives out of turn."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import trio

READ_TIMEOUT_S = 15.0


def content_length(body: bytes) -> bytes:
    """`body` as one LSP-style message."""
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class LineClient:
    """Sends, reads and waits for messages; a subclass says how bytes go and come."""

    def __init__(self, *, framed: bool = False) -> None:
        self.framed = framed
        self.stash: list[dict[str, Any]] = []
        self._buffer = bytearray()

    async def _write(self, data: bytes) -> None:
        raise NotImplementedError

    async def _read(self) -> bytes:
        """The next bytes the gateway wrote; b"" once its output ended."""
        raise NotImplementedError

    def _gone(self) -> str:
        """What to say when the gateway's output ended (its log, say)."""
        return ""

    async def send(self, message: Mapping[str, Any] | bytes) -> None:
        if isinstance(message, bytes):
            data = message
        elif self.framed:
            data = content_length(json.dumps(message).encode())
        else:
            data = json.dumps(message).encode() + b"\n"
        await self._write(data)

    async def recv(self, timeout: float = READ_TIMEOUT_S) -> dict[str, Any]:
        """The next message (stashed ones first)."""
        if self.stash:
            return self.stash.pop(0)
        with trio.fail_after(timeout):
            while b"\n" not in self._buffer:
                chunk = await self._read()
                if not chunk:
                    raise EOFError(f"gateway closed stdout; {self._gone()}")
                self._buffer += chunk
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        value = json.loads(line)
        assert isinstance(value, dict)
        return value

    async def reply_to(self, request_id: Any, timeout: float = READ_TIMEOUT_S) -> dict[str, Any]:
        """Read until the response for `request_id`; stash everything else."""
        for index, message in enumerate(self.stash):
            if message.get("id") == request_id and "method" not in message:
                return self.stash.pop(index)
        held: list[dict[str, Any]] = []
        try:
            while True:
                message = await self.recv(timeout)
                if message.get("id") == request_id and "method" not in message:
                    return message
                held.append(message)
        finally:
            self.stash.extend(held)

    async def request(self, request_id: Any, method: str, params: Mapping[str, Any] | None = None,
                      ) -> dict[str, Any]:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            msg["params"] = dict(params)
        await self.send(msg)
        return await self.reply_to(request_id)

    async def initialize(self, version: str = "2025-11-25") -> dict[str, Any]:
        reply = await self.request("init", "initialize", {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "wire", "version": "1"}})
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return reply

    async def expect_silence(self, seconds: float) -> None:
        """Assert nothing arrives on stdout for `seconds`."""
        with trio.move_on_after(seconds):
            message = await self.recv(timeout=seconds + 1)
            raise AssertionError(f"expected no message, got {message}")

    async def expect_no_reply(self, seconds: float) -> None:
        """Assert no response arrives for `seconds` (notifications are stashed, not failures)."""
        held: list[dict[str, Any]] = []
        try:
            with trio.move_on_after(seconds):
                while True:
                    message = await self.recv(timeout=seconds + 1)
                    if "method" not in message:
                        raise AssertionError(f"expected no response, got {message}")
                    held.append(message)
        finally:
            self.stash.extend(held)
