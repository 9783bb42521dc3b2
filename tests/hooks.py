"""Helpers for hook tests: write a manifest, hook commands as one-line shell scripts, and a
loopback HTTP server for http hooks."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def set_hooks(home: Path, *hooks: dict[str, Any]) -> None:
    """Replace the home's manifest with `hooks` (enabled, PreToolUse, matching all by default)."""
    rows = [{"id": f"h{i}", "event": "PreToolUse", "matcher": "*", "type": "command", "enabled": True,
             "timeout": 10, **hook} for i, hook in enumerate(hooks)]
    (home / "hooks" / "hooks.manifest.json").write_text(json.dumps({"version": 1, "hooks": rows}))


def decision(kind: str, reason: str = "", **extra: Any) -> str:
    """A shell command printing a Claude Code PreToolUse JSON decision."""
    out: dict[str, Any] = {"hookEventName": "PreToolUse", "permissionDecision": kind, **extra}
    if reason:
        out["permissionDecisionReason"] = reason
    return f"echo '{json.dumps({'hookSpecificOutput': out})}'"


EXIT2_DENY = "echo 'exit-2 says no' >&2; exit 2"
JSON_DENY = decision("deny", "json says no")


# What a test's hook server replies to (path, payload): status, body, and a pause before it.
Answer = Callable[[str, Any], tuple[int, bytes, float]]


class HookServer:
    """A real loopback HTTP hook server for tests (a thread, port 0, HTTP/1.1 keep-alive).

    `answer(path, payload) -> (status, body, delay_s)` decides each reply (default: 200, empty).
    It records every request (`requests`: path, headers, payload) and every TCP connection it
    accepted (`connections`), so a test can see that calls reuse one connection. `idle_timeout`
    closes an idle connection after that long; `close` answers `Connection: close`."""

    def __init__(self, answer: Answer | None = None, *, idle_timeout: float | None = None,
                 close: bool = False) -> None:
        self.answer: Answer = answer or (lambda path, payload: (200, b"", 0.0))
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.connections = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = idle_timeout  # an idle kept-alive connection is closed after this

            def setup(self) -> None:
                server.connections += 1
                super().setup()

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                payload = json.loads(raw) if raw else None
                server.requests.append((self.path, dict(self.headers.items()), payload))
                status, body, delay = server.answer(self.path, payload)
                if delay:
                    time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    if close:
                        self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the client gave up (a timeout, a cancel)
                    self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def __enter__(self) -> HookServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def answering(status: int = 200, body: Any = b"", delay: float = 0.0) -> Answer:
    """An `answer` that always replies `status` with `body` (an object is sent as its JSON)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return lambda path, payload: (status, data, delay)


def http_hook(url: str, **fields: Any) -> dict[str, Any]:
    """A manifest row (for `set_hooks`) of an http hook posting to `url`."""
    return {"type": "http", "url": url, **fields}


def pre_output(kind: str, reason: str = "", **extra: Any) -> dict[str, Any]:
    """A Claude Code PreToolUse JSON decision, as an http hook answers it."""
    out: dict[str, Any] = {"hookEventName": "PreToolUse", "permissionDecision": kind, **extra}
    if reason:
        out["permissionDecisionReason"] = reason
    return {"hookSpecificOutput": out}
