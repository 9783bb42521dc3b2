"""A persistent hook server: the deny-dangerous policy as a Claude Code `type: "http"` hook.

The same rules as `deny_dangerous.py` (imported from beside this file), answered over HTTP instead
of from a process started per call: the gateway POSTs each PreToolUse payload here on one kept-alive
connection, so a check costs a request, not a Python start-up. Python standard library only.

Run it (it listens on loopback only, and prints its URL once it does):

    python3 hooks/scripts/hook_server.py --port 8377

Then switch on the shipped row that points at it (`"type": "http"`, disabled in a new home):

    tfunnel hook enable pre-tool-use/deny-dangerous-http

or add your own: `tfunnel hook add my-http-policy --event PreToolUse --url http://127.0.0.1:8377/pre`.

Answers, as the http hook protocol reads them: `200` with an empty body = no objection; `200` with
`{"hookSpecificOutput": {"permissionDecision": "deny", ...}}` = blocked, with the reason. A payload
that cannot be read is denied too (a gate that cannot read its input must not say yes), and so is
one over the size cap. If the server is down the gateway treats the hook as not answering: the call
runs, unless the row says `"failClosed": true`.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deny_dangerous import DANGEROUS  # the one policy, shared with the command hook

# A payload holds one call's arguments; anything bigger than this is not read, and denied.
MAX_PAYLOAD_BYTES = 16 * 1024 * 1024
DEFAULT_PORT = 8377


def decide(payload: Any) -> str | None:
    """The reason to block this payload, or None for no objection."""
    if not isinstance(payload, dict):
        return "deny-dangerous: unreadable hook payload"
    text = json.dumps(payload.get("tool_input", {}))
    for pattern, what in DANGEROUS:
        if pattern.search(text):
            return f"blocked by deny-dangerous: the input looks like {what}"
    return None


def deny(reason: str) -> bytes:
    return json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                              "permissionDecisionReason": reason}}).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the gateway reuses one connection
    # Small answers on a kept-alive connection: Nagle's algorithm would hold each one back
    # waiting for an ACK that the client delays.
    disable_nagle_algorithm = True
    server_version = "tfunnel-hook-server"

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_PAYLOAD_BYTES:
            # Not read: the connection cannot carry another request after it.
            self.close_connection = True
            self._answer(deny("deny-dangerous: the payload is missing or too large to read"))
            return
        raw = self.rfile.read(length)
        try:
            payload = json.loads(raw)
        except ValueError:
            payload = None
        reason = decide(payload)
        self._answer(b"" if reason is None else deny(reason))

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        # The head and the body in one write (end_headers would flush the head alone).
        self._headers_buffer.append(b"\r\n" + body)
        self.flush_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per call would be noise; the gateway audits decisions


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="a loopback address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}; 0 picks one")
    args = parser.parse_args(argv)
    try:
        loopback = args.host == "localhost" or ipaddress.ip_address(args.host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        parser.error("--host must be a loopback address: the payloads hold every call's arguments")
    server_class = _Server6 if ":" in args.host else ThreadingHTTPServer
    server = server_class((args.host, args.port), Handler)
    server.daemon_threads = True
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in str(host) else host
    print(f"hook server listening on http://{shown}:{port}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
