"""A bare Trio relay in front of one stdio MCP server: the floor for one Python hop.

    python bench/relay.py COMMAND [ARGS...]

It starts COMMAND at once (as a gateway starts its upstream), then copies NDJSON both ways:
read a line, `json.loads` it, give a request a fresh id (remembering the sender's id), give a
response back the id its request came with, `json.dumps` it, write it. Nothing else: no
validation, no routing, no logging. Requests the server sends the client are mapped the same way.
A line that is not JSON is passed on unchanged.

Deliberately not handled, because the benchmark never needs them: the `requestId` inside
`notifications/cancelled`, JSON-RPC batches, and backpressure beyond what the pipes give.

The server inherits our stderr and our process group, so killing our group kills it too. On EOF
from our stdin we close the server's stdin and exit when it does.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from typing import Any

import trio

READ_CHUNK = 65536


async def pump(
    source: trio.abc.ReceiveStream,
    sink: trio.abc.SendStream,
    ours_to_theirs: dict[int, Any],
    theirs_to_ours: dict[int, Any],
    ids: itertools.count[int],
) -> None:
    """Copy messages from `source` to `sink` until EOF, rewriting ids.

    A request read from `source` gets a fresh id; `ours_to_theirs` remembers the original. A
    response read from `source` answers a request that travelled the other way, so its id is
    looked up (and dropped) in `theirs_to_ours`, the other pump's map.
    """
    pending = b""
    while chunk := await source.receive_some(READ_CHUNK):
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        out: list[bytes] = []
        for line in lines:
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                out.append(line)
                continue
            if isinstance(message, dict) and "id" in message:
                if "method" in message:
                    new_id = next(ids)
                    ours_to_theirs[new_id] = message["id"]
                    message["id"] = new_id
                else:
                    message["id"] = theirs_to_ours.pop(message["id"], message["id"])
            out.append(json.dumps(message, separators=(",", ":")).encode())
        if out:
            await sink.send_all(b"\n".join(out) + b"\n")


async def relay(argv: list[str]) -> int:
    server = await trio.lowlevel.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None and server.stdout is not None
    client_in = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    client_out = trio.lowlevel.FdStream(os.dup(sys.stdout.fileno()))
    client_ids: dict[int, Any] = {}  # id we gave a client request -> the client's id
    server_ids: dict[int, Any] = {}  # id we gave a server request -> the server's id
    ids = itertools.count(1)

    async def downstream() -> None:
        assert server.stdin is not None
        async with server.stdin:
            await pump(client_in, server.stdin, client_ids, server_ids, ids)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(downstream)
        await pump(server.stdout, client_out, server_ids, client_ids, ids)
        nursery.cancel_scope.cancel()  # the server is gone; stop reading the client too
    return await server.wait()


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: relay.py COMMAND [ARGS...]")
    sys.exit(trio.run(relay, sys.argv[1:]))


if __name__ == "__main__":
    main()
