"""A small, real stdio MCP server (legacy era) with fault modes, for testing gateways against.

Stdlib only on purpose: it must start fast and be an independent peer, so it imports nothing from
tfunnel, trio or the mcp SDK. Run it as ``python -m tfunnel.testing.mock_upstream [options]`` or as
``python path/to/mock_upstream.py [options]``. Why one file of this size: it is seeded into homes as
the demo server and run as a script, so it stays self-contained (no sibling modules to ship).

Wire: NDJSON on stdin/stdout (one JSON-RPC object per line); logs go only to stderr, prefixed
"mock-upstream: ". A reader thread parses stdin and hands every request to its own daemon worker
thread, so a slow call never blocks others and responses may come out of order. One lock guards
stdout so each line is written and flushed whole. Stdin EOF exits 0, abandoning in-flight workers.

Methods:
  initialize                 echoes protocolVersion if it is 2024-11-05, 2025-03-26, 2025-06-18 or
                             2025-11-25, else answers 2025-11-25; serverInfo {name (--name), "1.0.0"};
                             capabilities {"tools": {"listChanged": true}}; instructions set.
  notifications/initialized  accepted (ignored).
  ping                       -> {}.
  tools/list                 -> the advertised tools below (one page, no cursor).
  tools/call                 -> see tools; unknown or unadvertised tool -> -32602 "Unknown tool: <name>".
  notifications/cancelled    {requestId, reason?}: appends json(requestId) + "\\n" to --cancel-log (for any
                             id, known or not) and marks an in-flight request cancelled: it never answers.
  server/discover, others    -> -32601 (a legacy-only server). Notifications are never answered.
  responses from the client  are matched to our own server->client requests (ping_client, elicit).
  bad input                  non-JSON line -> -32700, non-object or an id not string/int -> -32600 (id null).

Tools (bad argument types give an isError result, not a protocol error):
  ping {}                  text "pong".
  add {a, b}               text of a+b, structuredContent {"result": a+b}; title "Add Numbers",
                           outputSchema, annotations {"readOnlyHint": true}. Non-numeric -> isError
                           "add requires numeric a and b".
  echo {text}              text = text.
  slow {seconds}           sleeps, then text "slept <seconds>"; if cancelled meanwhile, no answer.
  progress {steps=3, delay=0.1}
                           if params._meta.progressToken is present, sends notifications/progress
                           {progressToken, progress: i, total: steps, message: "step i"} for i in
                           1..steps, sleeping `delay` between; then text "progress done (token seen)"
                           or "progress done (no token)".
  crash {}                 os._exit(3) without answering.
  hang {}                  never answers.
  garbage {}               writes the non-JSON line "this is not json" to stdout, then text "after garbage".
  big {bytes}              one text block of `bytes` "x" characters.
  flood {bytes}            writes `bytes` "e" bytes to stderr (flushed 64 KiB chunks); text "flooded <bytes>".
  spawn {holdStdout=false, setsid=false}
                           starts a grandchild `sleep 300` in our process group (stdio on /dev/null);
                           structuredContent {"pid": pid} and text str(pid). `holdStdout`: the
                           grandchild inherits our stdout (it keeps the pipe open after we die);
                           `setsid`: it starts its own session (it escapes our process group).
  change_tools {}          toggles the extra tool `extra` in later tools/list answers, sends
                           notifications/tools/list_changed, then text "tools changed".
  ping_client {}           sends a server->client `ping` (id "mock-ping-N"), waits up to 10 s: text
                           "client answered ping"; isError "client ping failed: <error JSON>" on an
                           error response; isError "no answer to ping" on timeout.
  elicit {message="Proceed?"}
                           sends `elicitation/create` (id "mock-elicit-N", form mode, schema with a
                           boolean `ok`), waits up to 10 s: text = JSON {"action", "content"} of the
                           answer (content null when absent); isError "client elicitation failed:
                           <error JSON>" on an error response; isError "no answer to elicitation".
  extra {}                 (only while toggled on) text "extra".

Fault tools (served and advertised only when named in --tools, so the default set stays the above):
  list_changed_storm {count}
                           writes `count` notifications/tools/list_changed at once (one write), then
                           text "stormed <count>". The tools themselves do not change.
  bad_answer {kind}        answers this call with a broken line, by `kind`: "deep" (a result nested
                           BAD_DEPTH objects deep, id first), "result_string" (result "oops"), "both"
                           (result and error), "error_string" (error "oops"), "invalid_json" (a line
                           cut off after the id), "neither" (only jsonrpc and id). "unknown_id" sends
                           an answer to an id nobody asked for, then the real answer: text "after
                           unknown id".

Options (applied in this order at start):
  --ignore-sigterm         set SIGTERM to SIG_IGN (inherited by `spawn` grandchildren).
  --pid-file PATH          write our pid to PATH.
  --exit-at-start CODE     log "mock-upstream: exiting at start" to stderr, exit CODE, read nothing.
  --stderr-at-start BYTES  write BYTES "e" bytes to stderr (blocking if nobody reads) before serving.
  --delay-start SECONDS    sleep before serving.
  --cancel-log PATH        file that cancellations are appended to (see notifications/cancelled).
  --tools NAMES            comma-separated subset of the tools above to advertise and serve (default all;
                           `extra` follows change_tools regardless).
  --name NAME              serverInfo.name (default "mock-upstream").
  --method-log PATH        file that the method of every request and notification received is appended
                           to, one per line, before it is handled.
  --silent-before-initialize
                           requests other than `initialize` that arrive before it are never answered
                           (an era probe then times out).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

JSON = dict[str, Any]

VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST = "2025-11-25"
CHUNK = 64 * 1024
CLIENT_PING_TIMEOUT = 10.0  # also how long `elicit` waits for its answer
ELICIT_SCHEMA: JSON = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def _schema(properties: JSON | None = None, required: tuple[str, ...] = ()) -> JSON:
    schema: JSON = {"type": "object", "properties": properties or {}, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


_NUMBER: JSON = {"type": "number"}
_COUNT: JSON = {"type": "integer", "minimum": 0}

# name -> (description, inputSchema); `add` gets its extra fields in _tool_entry.
TOOL_SPECS: dict[str, tuple[str, JSON]] = {
    "ping": ("Answer pong.", _schema()),
    "add": ("Add two numbers.", _schema({"a": _NUMBER, "b": _NUMBER}, ("a", "b"))),
    "echo": ("Echo the text back.", _schema({"text": {"type": "string"}}, ("text",))),
    "slow": ("Sleep, then answer.", _schema({"seconds": {**_NUMBER, "minimum": 0}}, ("seconds",))),
    "progress": ("Send progress notifications, then answer.", _schema({
        "steps": {**_COUNT, "default": 3}, "delay": {**_NUMBER, "minimum": 0, "default": 0.1}})),
    "crash": ("Exit the process without answering.", _schema()),
    "hang": ("Never answer.", _schema()),
    "garbage": ("Write a non-JSON line to stdout, then answer.", _schema()),
    "big": ("Answer with a text block of this many bytes.", _schema({"bytes": _COUNT}, ("bytes",))),
    "flood": ("Write this many bytes to stderr, then answer.", _schema({"bytes": _COUNT}, ("bytes",))),
    "spawn": ("Start a grandchild `sleep 300`; answer its pid.", _schema({
        "holdStdout": {"type": "boolean"}, "setsid": {"type": "boolean"}})),
    "change_tools": ("Toggle the `extra` tool and send tools/list_changed.", _schema()),
    "ping_client": ("Ping the client and report whether it answered.", _schema()),
    "elicit": ("Ask the client a yes/no question; answer with its reply.",
               _schema({"message": {"type": "string"}})),
}
EXTRA_SPEC = ("Present only after change_tools.", _schema())
FAULT_SPECS: dict[str, tuple[str, JSON]] = {
    "list_changed_storm": ("Send this many tools/list_changed notifications at once.",
                           _schema({"count": _COUNT}, ("count",))),
    "bad_answer": ("Answer with a broken line of this kind.",
                   _schema({"kind": {"type": "string"}}, ("kind",))),
}
# Deeper than any JSON parser recurses by default (Python's stops near 1000).
BAD_DEPTH = 100_000


def _tool_entry(name: str, spec: tuple[str, JSON]) -> JSON:
    entry: JSON = {"name": name, "description": spec[0], "inputSchema": spec[1]}
    if name == "add":
        entry["title"] = "Add Numbers"
        entry["outputSchema"] = {"type": "object", "properties": {"result": _NUMBER}}
        entry["annotations"] = {"readOnlyHint": True}
    return entry


def log(message: str) -> None:
    sys.stderr.write(f"mock-upstream: {message}\n")
    sys.stderr.flush()


class Exited(BaseException):
    """Raised by an in-process server's `exit` in the worker that asked for it."""


class ProcessIO:
    """Where a server's bytes go as a process: stdout, stderr, and `os._exit`. (The in-process
    double, `tfunnel.testing.inproc`, hands a server its own.)"""

    in_process = False

    def write_out(self, data: bytes) -> None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()

    def write_err(self, data: bytes) -> None:
        sys.stderr.buffer.write(data)
        sys.stderr.buffer.flush()

    def exit(self, code: int) -> None:
        os._exit(code)  # no cleanup, no answer: like a real crash


class ToolInputError(Exception):
    """Bad tool arguments: reported as an isError result, as the spec asks for input validation."""


class RpcError(Exception):
    """A JSON-RPC protocol error to answer with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _text(text: str, is_error: bool = False, structured: JSON | None = None) -> JSON:
    result: JSON = {"content": [{"type": "text", "text": text}]}
    if is_error:
        result["isError"] = True
    if structured is not None:
        result["structuredContent"] = structured
    return result


def _number(args: JSON, key: str, default: float | None = None) -> float:
    value = args.get(key, default)
    # bool is an int subclass in Python but not a JSON number.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolInputError(f"{key} must be a number")
    return value


class Call:
    """One in-flight request; `cancelled` wakes sleepers so a cancelled request can stop early."""

    def __init__(self, request_id: Any, method: str, params: JSON) -> None:
        self.id, self.method, self.params = request_id, method, params
        self.args: JSON = params.get("arguments") or {}
        self.meta: JSON = params.get("_meta") or {}
        self.cancelled = threading.Event()


class Server:
    """Reader loop, per-request worker threads, and the tools; all shared state is behind state_lock."""

    def __init__(self, opts: argparse.Namespace, io: ProcessIO | None = None) -> None:
        self.opts = opts
        self.io = io or ProcessIO()
        self.advertised: list[str] = opts.tools
        self.out_lock = threading.Lock()
        self.state_lock = threading.Lock()
        self.in_flight: dict[Any, Call] = {}
        self.extra_on = False
        self.initialized = False
        self.ping_seq = 0
        self.ping_waiters: dict[str, tuple[threading.Event, list[JSON]]] = {}
        self.children: list[subprocess.Popen[bytes]] = []  # kept so Popen objects are not collected

    def write_line(self, line: bytes) -> None:
        with self.out_lock:
            try:
                self.io.write_out(line + b"\n")
            except BrokenPipeError:
                self.log("stdout closed; dropping a message")  # the reader will see EOF and exit

    def log(self, message: str) -> None:
        self.io.write_err(f"mock-upstream: {message}\n".encode())

    def send(self, message: JSON) -> None:
        self.write_line(json.dumps({"jsonrpc": "2.0", **message}, separators=(",", ":")).encode())

    def send_error(self, request_id: Any, code: int, message: str) -> None:
        self.send({"id": request_id, "error": {"code": code, "message": message}})

    def serve(self) -> None:
        for raw in sys.stdin.buffer:
            if raw.strip():
                self.receive(raw)
        self.log("stdin closed; exiting")

    def abandon(self) -> None:
        """Wake every waiting worker (in flight, or waiting for the client), as an exit would
        end them: an in-process server's threads must not outlive it."""
        with self.state_lock:
            calls = list(self.in_flight.values())
            waiters = list(self.ping_waiters.values())
        for call in calls:
            call.cancelled.set()
        for done, _ in waiters:
            done.set()

    def receive(self, raw: bytes) -> None:
        try:
            message = json.loads(raw)
        except ValueError:
            self.send_error(None, -32700, "Parse error")
            return
        if not isinstance(message, dict):
            self.send_error(None, -32600, "Invalid Request")
            return
        method, request_id, params = message.get("method"), message.get("id"), message.get("params")
        params = params if isinstance(params, dict) else {}
        if isinstance(method, str) and self.opts.method_log:
            with open(self.opts.method_log, "a", encoding="utf-8") as fh:
                fh.write(method + "\n")
        if not isinstance(method, str):
            self.on_response(message)
        elif request_id is None:
            # Inline on the reader thread, so a cancel is applied before any later message is read.
            if method == "notifications/cancelled":
                self.on_cancelled(params.get("requestId"))
        elif isinstance(request_id, bool) or not isinstance(request_id, str | int):
            self.send_error(None, -32600, "Invalid Request: id must be a string or an integer")
        elif self.opts.silent_before_initialize and not self.initialized and method != "initialize":
            self.log(f"silent to {method} before initialize")
        else:
            self.initialized = self.initialized or method == "initialize"
            call = Call(request_id, method, params)
            # Registered here, on the reader thread, so a cancel read right after it always finds it.
            with self.state_lock:
                self.in_flight[request_id] = call
            # Daemon: on stdin EOF we exit without waiting for a `hang` or `slow` worker.
            threading.Thread(target=self.run, args=(call,), daemon=True).start()

    def on_cancelled(self, request_id: Any) -> None:
        with self.state_lock:
            call = self.in_flight.get(request_id) if isinstance(request_id, str | int) else None
        if call is not None:
            call.cancelled.set()  # before logging: a test that sees the log line sees it cancelled
        if self.opts.cancel_log:
            with open(self.opts.cancel_log, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(request_id) + "\n")
        self.log(f"cancelled {request_id!r}")

    def on_response(self, message: JSON) -> None:
        with self.state_lock:
            waiter = self.ping_waiters.pop(str(message.get("id")), None)
        if waiter is None:
            self.log(f"unexpected response id {message.get('id')!r}")
            return
        waiter[1].append(message)
        waiter[0].set()

    def run(self, call: Call) -> None:
        try:
            reply = self.answer(call)
        except Exited:  # an in-process server's exit ends its worker here (a process's never returns)
            return
        with self.state_lock:
            self.in_flight.pop(call.id, None)
        # A cancelled request SHOULD NOT be answered (spec 1.7); None means "no answer" by design.
        if reply is not None and not call.cancelled.is_set():
            self.send({"id": call.id, **reply})

    def answer(self, call: Call) -> JSON | None:
        try:
            result = self.dispatch(call)
        except RpcError as err:
            return {"error": {"code": err.code, "message": str(err)}}
        except Exception as err:  # a fixture must answer, not die silently in a thread
            self.log(f"internal error in {call.method}: {err!r}")
            return {"error": {"code": -32603, "message": f"Internal error: {err}"}}
        return None if result is None else {"result": result}

    def dispatch(self, call: Call) -> JSON | None:
        if call.method == "initialize":
            return self.initialize(call.params)
        if call.method == "ping":
            return {}
        if call.method == "tools/list":
            return {"tools": self.tools()}
        if call.method == "tools/call":
            return self.call_tool(call)
        raise RpcError(-32601, f"Method not found: {call.method}")

    def initialize(self, params: JSON) -> JSON:
        requested = params.get("protocolVersion")
        return {
            "protocolVersion": requested if requested in VERSIONS else LATEST,
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": self.opts.name, "version": "1.0.0"},
            "instructions": "Mock upstream for tfunnel tests.",
        }

    def tools(self) -> list[JSON]:
        entries = [_tool_entry(name, TOOL_SPECS.get(name) or FAULT_SPECS[name]) for name in self.advertised]
        if self.extra_on:
            entries.append(_tool_entry("extra", EXTRA_SPEC))
        return entries

    def call_tool(self, call: Call) -> JSON | None:
        name = call.params.get("name")
        served = name in self.advertised or (name == "extra" and self.extra_on)
        if not isinstance(name, str) or not served:
            raise RpcError(-32602, f"Unknown tool: {name}")
        handler: Callable[[Call], JSON | None] = getattr(self, f"tool_{name}")
        try:
            return handler(call)
        except ToolInputError as err:
            return _text(str(err), is_error=True)

    # -- tools: each returns a CallToolResult, or None to send nothing ------------------------------

    def tool_ping(self, call: Call) -> JSON:
        return _text("pong")

    def tool_add(self, call: Call) -> JSON:
        try:
            total = _number(call.args, "a") + _number(call.args, "b")
        except ToolInputError:
            return _text("add requires numeric a and b", is_error=True)
        return _text(str(total), structured={"result": total})

    def tool_echo(self, call: Call) -> JSON:
        text = call.args.get("text")
        if not isinstance(text, str):
            raise ToolInputError("echo requires a string text")
        return _text(text)

    def tool_slow(self, call: Call) -> JSON | None:
        seconds = _number(call.args, "seconds")
        if call.cancelled.wait(max(seconds, 0)):
            return None
        return _text(f"slept {call.args['seconds']}")

    def tool_progress(self, call: Call) -> JSON | None:
        steps, delay = int(_number(call.args, "steps", 3)), _number(call.args, "delay", 0.1)
        token = call.meta.get("progressToken")
        for step in range(1, steps + 1):
            if step > 1 and call.cancelled.wait(max(delay, 0)):
                return None
            if token is not None:
                self.send({"method": "notifications/progress", "params": {
                    "progressToken": token, "progress": step, "total": steps, "message": f"step {step}"}})
        return _text("progress done (token seen)" if token is not None else "progress done (no token)")

    def tool_crash(self, call: Call) -> None:
        self.log("crashing on request (exit 3)")
        self.io.exit(3)

    def tool_hang(self, call: Call) -> None:
        call.cancelled.wait()  # returns only when cancelled; either way nothing is sent

    def tool_garbage(self, call: Call) -> JSON:
        self.write_line(b"this is not json")
        return _text("after garbage")

    def tool_big(self, call: Call) -> JSON:
        return _text("x" * int(_number(call.args, "bytes")))

    def tool_flood(self, call: Call) -> JSON:
        size = int(_number(call.args, "bytes"))
        flood_stderr(size, self.io.write_err)
        return _text(f"flooded {size}")

    def tool_spawn(self, call: Call) -> JSON:
        if self.io.in_process:
            raise ToolInputError("spawn needs the mock as a process (this one runs in-process)")
        # By default the same process group (no start_new_session), so a gateway's group kill
        # must reach it too; `setsid` makes a daemon that a group kill cannot reach.
        child = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL,
                                 stdout=None if call.args.get("holdStdout") is True else subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=call.args.get("setsid") is True)
        self.children.append(child)
        return _text(str(child.pid), structured={"pid": child.pid})

    def tool_change_tools(self, call: Call) -> JSON:
        with self.state_lock:
            self.extra_on = not self.extra_on
        self.send({"method": "notifications/tools/list_changed"})
        return _text("tools changed")

    def ask_client(self, kind: str, method: str, params: JSON | None = None) -> JSON | None:
        """Send a server->client request and wait for the client's response message (None: none came)."""
        with self.state_lock:
            self.ping_seq += 1
            ask_id = f"mock-{kind}-{self.ping_seq}"
            done, box = threading.Event(), list[JSON]()
            self.ping_waiters[ask_id] = (done, box)
        self.send({"id": ask_id, "method": method, **({"params": params} if params is not None else {})})
        if not done.wait(CLIENT_PING_TIMEOUT):
            with self.state_lock:
                self.ping_waiters.pop(ask_id, None)
            return None
        return box[0]

    def tool_ping_client(self, call: Call) -> JSON:
        response = self.ask_client("ping", "ping")
        if response is None:
            return _text("no answer to ping", is_error=True)
        error = response.get("error")
        if error is not None:
            return _text(f"client ping failed: {json.dumps(error)}", is_error=True)
        return _text("client answered ping")

    def tool_elicit(self, call: Call) -> JSON:
        message = call.args.get("message", "Proceed?")
        response = self.ask_client("elicit", "elicitation/create", {
            "mode": "form", "message": str(message), "requestedSchema": ELICIT_SCHEMA})
        if response is None:
            return _text("no answer to elicitation", is_error=True)
        if response.get("error") is not None:
            return _text(f"client elicitation failed: {json.dumps(response['error'])}", is_error=True)
        result = response.get("result") or {}
        return _text(json.dumps({"action": result.get("action"), "content": result.get("content")}))

    def tool_extra(self, call: Call) -> JSON:
        return _text("extra")

    def tool_list_changed_storm(self, call: Call) -> JSON:
        count = int(_number(call.args, "count"))
        note = json.dumps({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}).encode()
        self.write_line(b"\n".join([note] * count))
        return _text(f"stormed {count}")

    def tool_bad_answer(self, call: Call) -> JSON | None:
        kind = call.args.get("kind")
        head = b'{"jsonrpc":"2.0","id":' + json.dumps(call.id).encode()
        lines = {
            "deep": head + b',"result":' + b'{"a":' * BAD_DEPTH + b"1" + b"}" * BAD_DEPTH + b"}",
            "result_string": head + b',"result":"oops"}',
            "both": head + b',"result":{},"error":{"code":1,"message":"x"}}',
            "error_string": head + b',"error":"oops"}',
            "invalid_json": head + b',"result":{"content":[',
            "neither": head + b"}",
        }
        if kind == "unknown_id":
            self.send({"id": 987654321, "result": {"content": []}})
            return _text("after unknown id")
        if kind not in lines:
            raise ToolInputError(f"unknown kind {kind!r}")
        self.write_line(lines[kind])
        return None


def flood_stderr(size: int, write: Callable[[bytes], None] | None = None) -> None:
    write = write or ProcessIO().write_err
    chunk = b"e" * CHUNK
    while size > 0:
        write(chunk[:size])
        size -= CHUNK


# -- command line -----------------------------------------------------------------------------------

def _tool_list(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in TOOL_SPECS and name not in FAULT_SPECS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown tools: {', '.join(unknown)}")
    return names


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mock_upstream", description="Stdio MCP upstream with fault modes.")
    parser.add_argument("--cancel-log", metavar="PATH", help="append cancelled request ids here")
    parser.add_argument("--pid-file", metavar="PATH", help="write our pid here at start")
    parser.add_argument("--exit-at-start", metavar="CODE", type=int, help="exit with CODE before serving")
    parser.add_argument("--ignore-sigterm", action="store_true", help="ignore SIGTERM")
    parser.add_argument("--stderr-at-start", metavar="BYTES", type=int, default=0,
                        help="write BYTES to stderr before serving")
    parser.add_argument("--delay-start", metavar="SECONDS", type=float, default=0.0,
                        help="sleep before serving")
    parser.add_argument("--tools", metavar="NAMES", type=_tool_list, default=list(TOOL_SPECS),
                        help="comma-separated tools to advertise (default all)")
    parser.add_argument("--name", default="mock-upstream", help="serverInfo.name")
    parser.add_argument("--method-log", metavar="PATH", help="append every received method here")
    parser.add_argument("--silent-before-initialize", action="store_true",
                        help="never answer requests that arrive before initialize")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    if opts.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if opts.pid_file:
        with open(opts.pid_file, "w", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()}\n")
    if opts.exit_at_start is not None:
        log("exiting at start")
        return int(opts.exit_at_start)
    if opts.stderr_at_start > 0:
        flood_stderr(opts.stderr_at_start)
    if opts.delay_start > 0:
        time.sleep(opts.delay_start)
    Server(opts).serve()
    return 0


if __name__ == "__main__":
    code = main()
    # os._exit, not sys.exit: abandoned daemon workers may still hold stdout's buffer, and interpreter
    # shutdown can then abort ("could not acquire lock ... at interpreter shutdown").
    sys.stderr.flush()
    os._exit(code)
