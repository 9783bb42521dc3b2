"""A bare hypercorn relay in front of one stdio MCP server: the floor for the HTTP face.

    python bench/http_relay.py COMMAND [ARGS...]

The same shape as `tfunnel serve --http` with nothing of a gateway in it: a raw ASGI app on
hypercorn's trio worker takes `POST /mcp` with one JSON-RPC message, gives a request a fresh id
(an id map, as `bench/relay.py` keeps), writes it to COMMAND's stdin as one NDJSON line and
answers the upstream's response as `application/json` with the client's id; a notification is
written and answered 202. No sessions, no validation, no SSE, no routing, no logging: what is
left is the HTTP stack (hypercorn, h11) and one Python hop, which the gateway's HTTP face is
measured against.

It binds 127.0.0.1 on a free port and reports it on stderr the way the gateway does, one JSON
line `{"event": "listening", "urls": ["http://127.0.0.1:PORT"]}`, so `bench/http_peer.py` starts
and stops both alike. The server runs in our process group (a SIGKILL of the group ends both);
SIGTERM ends us at once.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import hypercorn.config
import hypercorn.trio
import trio

READ_CHUNK = 65536
JSON_HEADERS = [(b"content-type", b"application/json")]
PARSE_ERROR = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}'

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class _Pending:
    __slots__ = ("done", "reply")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.reply: dict[str, Any] = {}


class Relay:
    """The ASGI app and the upstream's reader: requests wait on their own entry of `pending`."""

    def __init__(self, server: trio.Process) -> None:
        assert server.stdin is not None
        self.server = server
        self.stdin = server.stdin
        self.pending: dict[int, _Pending] = {}
        self.ids = itertools.count(1)
        self.lock = trio.StrictFIFOLock()  # requests of many connections share one pipe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                event = await receive()
                if event["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif event["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if scope["method"] != "POST" or scope["path"] != "/mcp":
            await _answer(send, 404, b"")
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        try:
            message = json.loads(body)
        except ValueError:
            await _answer(send, 400, PARSE_ERROR)
            return
        if not (isinstance(message, dict) and "id" in message and "method" in message):
            await self._write(message)  # a notification (or a stray response): nothing comes back
            await _answer(send, 202, b"")
            return
        theirs = message["id"]
        ours = message["id"] = next(self.ids)
        pending = self.pending[ours] = _Pending()
        await self._write(message)
        await pending.done.wait()
        reply = pending.reply
        reply["id"] = theirs
        await _answer(send, 200, json.dumps(reply, separators=(",", ":")).encode())

    async def _write(self, message: Any) -> None:
        line = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        async with self.lock:
            await self.stdin.send_all(line)

    async def read_upstream(self) -> None:
        """Route the upstream's responses to their requests until it closes its stdout."""
        assert self.server.stdout is not None
        pending = b""
        while chunk := await self.server.stdout.receive_some(READ_CHUNK):
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                if not line.strip():
                    continue
                message = json.loads(line)
                if isinstance(message, dict) and "method" not in message:
                    waiter = self.pending.pop(message.get("id"), None)  # type: ignore[arg-type]
                    if waiter is not None:
                        waiter.reply = message
                        waiter.done.set()
        for waiter in self.pending.values():  # the upstream is gone: fail what waits
            waiter.reply = {"jsonrpc": "2.0", "error": {"code": -32000, "message": "upstream exited"}}
            waiter.done.set()


async def _answer(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*JSON_HEADERS, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def hypercorn_config() -> hypercorn.config.Config:
    """The settings the gateway gives hypercorn where they bear on speed (`tfunnel/app_http.py`)."""
    config = hypercorn.config.Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 0
    config.keep_alive_max_requests = 1_000_000  # as the gateway: no reconnect every 1000 calls
    return config


async def main(argv: list[str]) -> None:
    server = await trio.lowlevel.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    relay = Relay(server)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(relay.read_upstream)
        urls = await nursery.start(hypercorn.trio.serve, relay, hypercorn_config())
        os.write(2, (json.dumps({"event": "listening", "level": "info", "urls": urls}) + "\n").encode())


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: http_relay.py COMMAND [ARGS...]")
    trio.run(main, sys.argv[1:])
