#!/usr/bin/env python3
"""Re-capture the Claude Code field fixtures of this folder (standard library only).

    python3 claude_code_capture.py run CLAUDE_BIN OUT_DIR [WORK_DIR]

runs the real `claude` binary CLAUDE_BIN (installed beforehand with npm, see NOTE.md) against
  * a fake Anthropic Messages API on 127.0.0.1 (a thread of this process), playing a model that
    calls the MCP tool mcp__time__get_current_time once and then answers with text,
  * the real stdio MCP server mcp-server-time, behind a recording proxy (sub-command `proxy`),
  * command hooks that record their stdin and environment (sub-command `hook`),
and writes the fixtures into OUT_DIR. WORK_DIR (default /tmp/cc-capture/work) keeps the scratch
projects, a fresh HOME for each run, and the full logs. Nothing is installed or downloaded.

The other sub-commands are what Claude Code runs during a capture:
    claude_code_capture.py proxy LOG [DELAY] -- SERVER...  MCP stdio server logging both directions
    claude_code_capture.py hook LABEL [MODE [SECONDS]]     hook; MODE: record, exit2, json or sleep
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Json = dict[str, Any]

TOOL = "mcp__time__get_current_time"  # Claude Code's name for tool get_current_time of server "time"
TOOL_INPUT = {"timezone": "UTC"}
PROMPT = "What time is it in UTC?"
DENY_REASON = "Blocked by test policy: no time lookups."
JSON_DENY = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                    "permissionDecisionReason": DENY_REASON}}
# This file is tests/field/claude-code/claude_code_capture.py; the MCP servers are the checkout's.
REPO = Path(__file__).resolve().parent.parent.parent.parent
MCP_SERVER = os.environ.get("MCP_SERVER_TIME", str(REPO / ".venv/bin/mcp-server-time"))
# mcp-server-time 2025.9.25 on the mcp 1.x SDK: speaks only the initialize handshake (scripts/test).
LEGACY_SERVER = os.environ.get("MCP_SERVER_TIME_LEGACY", str(REPO / ".venv-legacy-time/bin/mcp-server-time"))


# ------------------------------------------------------------------ the fake Messages API

def sse(event: str, data: Json) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def model_turn(body: Json) -> list[Json]:
    """The content blocks the scripted model answers a /v1/messages request `body` with.

    Claude Code may not list the MCP tool in `tools` at once: it can offer it as a deferred tool
    that ToolSearch loads, or (older versions) still be connecting, offering WaitForMcpServers.
    The model does what a real one would: load or wait, call the tool once, then answer."""
    names = [t.get("name") for t in body.get("tools") or []]
    called: dict[str, str] = {}  # tool_use id -> tool name
    answered: list[str | None] = []  # names of the tools whose tool_result came back
    for m in body.get("messages") or []:
        for b in m["content"] if isinstance(m.get("content"), list) else []:
            if b.get("type") == "tool_use":
                called[b["id"]] = b["name"]
            elif b.get("type") == "tool_result":
                answered.append(called.get(b.get("tool_use_id")))

    def use(name: str, arguments: Json) -> list[Json]:
        tool_use_id = "toolu_" + uuid.uuid4().hex[:24]
        return [{"type": "tool_use", "id": tool_use_id, "name": name, "input": arguments}]

    if TOOL not in answered:
        if TOOL in names or "ToolSearch" in answered:
            return use(TOOL, TOOL_INPUT)
        if "ToolSearch" in names and TOOL in json.dumps(body):
            return use("ToolSearch", {"query": "select:" + TOOL})
        if "WaitForMcpServers" in names and answered.count("WaitForMcpServers") < 3:  # "try again"
            return use("WaitForMcpServers", {"servers": ["time"]})
    return [{"type": "text", "text": "Done."}]  # after the call, and for side requests


class Api(ThreadingHTTPServer):
    """Loopback Messages API; each request (method, path, headers, body) is appended to `log`."""

    daemon_threads = True

    def __init__(self, log: Path) -> None:
        self.log, self.lock = log, threading.Lock()
        super().__init__(("127.0.0.1", 0), ApiHandler)

    def record(self, entry: Json) -> None:
        with self.lock, self.log.open("a") as f:
            f.write(json.dumps(entry) + "\n")


class ApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Api
    NOT_FOUND = b'{"type":"error","error":{"type":"not_found_error","message":"not found"}}'

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def reply(self, code: int, payload: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(payload)))
        self.send_header("request-id", "req_" + uuid.uuid4().hex[:24])
        self.end_headers()
        self.wfile.write(payload)

    def do_HEAD(self) -> None:  # some versions check the base URL first
        self.server.record({"method": "HEAD", "path": self.path})
        self.reply(200, b"")

    def do_GET(self) -> None:
        self.server.record({"method": "GET", "path": self.path})
        self.reply(404, self.NOT_FOUND)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        self.server.record({"method": "POST", "path": self.path, "headers": dict(self.headers), "body": body})
        path = self.path.split("?")[0]
        if path.endswith("/v1/messages/count_tokens"):
            return self.reply(200, b'{"input_tokens": 100}')
        if not path.endswith("/v1/messages") or not isinstance(body, dict):
            return self.reply(404, self.NOT_FOUND)
        blocks = model_turn(body)
        stop = "tool_use" if blocks[-1]["type"] == "tool_use" else "end_turn"
        msg = {"id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant",
               "model": body.get("model", "claude-test"), "content": blocks, "stop_reason": stop,
               "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5}}
        if not body.get("stream"):
            return self.reply(200, json.dumps(msg).encode())
        # Streaming: the same message as server-sent events, a tool's input as one input_json_delta.
        start = {**msg, "content": [], "stop_reason": None, "usage": {"input_tokens": 10, "output_tokens": 1}}
        out = [sse("message_start", {"type": "message_start", "message": start})]
        for i, b in enumerate(blocks):
            first: Json
            if b["type"] == "text":
                first, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": b["text"]}
            else:
                first = {**b, "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}
            parts: list[tuple[str, Json]] = [("start", {"content_block": first}), ("delta", {"delta": delta})]
            for kind, extra in [*parts, ("stop", {})]:
                event = "content_block_" + kind
                out.append(sse(event, {"type": event, "index": i, **extra}))
        out.append(sse("message_delta", {"type": "message_delta", "usage": {"output_tokens": 5},
                                         "delta": {"stop_reason": stop, "stop_sequence": None}}))
        out.append(sse("message_stop", {"type": "message_stop"}))
        self.reply(200, b"".join(out), "text/event-stream")


# ------------------------------------------------------------------ MCP stdio recording proxy

def cmd_proxy(args: list[str]) -> int:
    """Spawn the real server and copy stdin -> server -> stdout line by line, appending each line
    to LOG as {"dir": "c2s"|"s2c", "message": <the line's bytes, verbatim>}. With DELAY, spawn it
    that many seconds late, like a server slow to start (client lines are read and logged at once)."""
    log, server = Path(args[0]), args[args.index("--") + 1:]
    delay = float(args[1]) if args.index("--") == 2 else 0.0
    lock, f = threading.Lock(), log.open("ab")
    spawned: list[subprocess.Popen[bytes]] = []
    ready = threading.Event()

    def record(direction: bytes, line: bytes) -> None:
        body = line.rstrip(b"\r\n")
        if body:  # a stdio message is one line of JSON, so it is embedded as it came
            with lock:
                f.write(b'{"dir": "' + direction + b'", "message": ' + body + b"}\n")
                f.flush()

    def client_to_server() -> None:
        for line in sys.stdin.buffer:
            record(b"c2s", line)
            ready.wait()
            to = spawned[0].stdin
            assert to is not None
            to.write(line)
            to.flush()
        ready.wait()
        assert spawned[0].stdin is not None
        spawned[0].stdin.close()

    threading.Thread(target=client_to_server, daemon=True).start()
    time.sleep(delay)
    child = subprocess.Popen(server, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    spawned.append(child)
    ready.set()
    assert child.stdout is not None
    for line in child.stdout:
        record(b"s2c", line)
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    return child.wait()


# ------------------------------------------------------------------ recording hook

def cmd_hook(args: list[str]) -> int:
    """Save stdin (the bytes as received) and the CLAUDE* environment in $CLAUDE_PROJECT_DIR/hook-out,
    then answer by MODE: record: exit 0; exit2: the reason on stderr, exit 2; json: the deny JSON
    on stdout, exit 0; sleep N: sleep N s first, touching LABEL@...alive to show how long it lived."""
    label, mode = args[0], (args[1] if len(args) > 1 else "record")
    out = Path(os.environ.get("CLAUDE_PROJECT_DIR", os.getcwd())) / "hook-out"
    out.mkdir(exist_ok=True)
    stem = f"{out}/{label}@{time.time_ns()}@{os.getpid()}"
    Path(stem + ".stdin").write_bytes(sys.stdin.buffer.read())
    env = {k: v for k, v in os.environ.items() if k.startswith("CLAUDE")}
    Path(stem + ".env").write_text(json.dumps({"env": env, "argv": sys.argv[1:], "cwd": os.getcwd()}))
    if mode == "sleep":
        end = time.time() + float(args[2])
        while time.time() < end:
            Path(stem + ".alive").touch()
            time.sleep(0.2)
        Path(stem + ".woke").write_text("")
    elif mode == "exit2":
        sys.stderr.write(DENY_REASON + "\n")
        return 2
    elif mode == "json":
        print(json.dumps(JSON_DENY))
    return 0


# ------------------------------------------------------------------ the settings of each run

def hook(label: str, timeout: float, mode: str = "") -> Json:
    cmd = f'python3 "$CLAUDE_PROJECT_DIR"/.claude/hooks/claude_code_capture.py hook {label} {mode}'.rstrip()
    return {"type": "command", "command": cmd, "timeout": timeout}


# The main capture (saved as settings.json): a regex and an exact matcher on each event.
SETTINGS = {
    "$schema": "https://json.schemastore.org/claude-code-settings.json",
    "hooks": {
        "PreToolUse": [{"matcher": "mcp__.*", "hooks": [hook("pre-regex", 30)]},
                       {"matcher": TOOL, "hooks": [hook("pre-exact", 10)]}],
        "PostToolUse": [{"matcher": "mcp__.*", "hooks": [hook("post-regex", 30)]},
                        {"matcher": TOOL, "hooks": [hook("post-exact", 10)]}],
    },
}
DENY = {mode: {"hooks": {"PreToolUse": [{"matcher": TOOL, "hooks": [hook("pre-deny", 10, mode)]}],
                         "PostToolUse": [{"matcher": "mcp__.*", "hooks": [hook("post", 10)]}]}}
        for mode in ("exit2", "json")}
# Matchers tried in one run: which fire, for which tool. None: an entry without "matcher".
PROBES = ["*", "", None, "mcp__.*", TOOL, "mcp__time__.*", "mcp__time__*", "^mcp__time__get_current_time$",
          "current_time$", "mcp__time__get_.*_time", "mcp__time", "get_current_time", "time", "MCP__.*",
          "mcp__Time__get_current_time", "mcp__time__get_current_tim", "Bash|" + TOOL, TOOL + "|Bash",
          "Bash, " + TOOL, "ToolSearch", "["]
PROBE = {"hooks": {ev: [{**({} if m is None else {"matcher": m}), "hooks": [hook(f"{ev}-{i:02d}", 10)]}
                        for i, m in enumerate(PROBES)] for ev in ("PreToolUse", "PostToolUse")}}
TIMEOUT = {"hooks": {"PreToolUse": [{"matcher": TOOL, "hooks": [hook("pre-sleep", 2, "sleep 8")]}]}}
# Wrong on purpose, for `claude doctor`: a string timeout, an unknown hook type, an unknown event.
INVALID = {"hooks": {
    "PreToolUse": [{"matcher": "mcp__.*", "hooks": [{"type": "command", "command": "true", "timeout": "30"}]},
                   {"matcher": TOOL, "hooks": [{"type": "shell", "command": "true"}]}],
    "PreToolUze": [{"matcher": "*", "hooks": [{"type": "command", "command": "true"}]}]}}


# ------------------------------------------------------------------ running Claude Code

def clean_env(home: Path, base_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "CLAUDE", "MCP_")) and k not in ("HOME", "DISABLE_TELEMETRY")}
    return {**env, "HOME": str(home), "ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": "test-key",
            "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}


def make_project(work: Path, name: str, settings: Json) -> Path:
    """A fresh scratch project with its own HOME (Claude Code remembers MCP servers there)."""
    root = work / name
    shutil.rmtree(root, ignore_errors=True)
    (root / "proj" / ".claude" / "hooks").mkdir(parents=True)
    (root / "home").mkdir()
    shutil.copy(__file__, root / "proj" / ".claude" / "hooks" / "claude_code_capture.py")
    (root / "proj" / ".claude" / "settings.json").write_text(json.dumps(settings, indent=2) + "\n")
    # The folder is trusted, as answering Claude Code's trust dialog would record (`mcp list` needs it).
    trust = {"projects": {str(root / "proj"): {"hasTrustDialogAccepted": True}}}
    (root / "home" / ".claude.json").write_text(json.dumps(trust))
    return root


def proxy_cmd(log: Path, delay: float = 0, server: str = MCP_SERVER) -> Json:
    delayed = [str(delay)] if delay else []
    me = str(Path(__file__).resolve())
    return {"command": "python3", "args": [me, "proxy", str(log), *delayed, "--", server]}


def session(claude: str, work: Path, name: str, settings: Json, **proxy: Any) -> Json:
    """One `claude -p` run in a fresh project; returns its hooks' records and its logs."""
    root = make_project(work, name, settings)
    api = Api(root / "api.jsonl")
    threading.Thread(target=api.serve_forever, daemon=True).start()
    servers = {"mcpServers": {"time": proxy_cmd(root / "mcp.jsonl", **proxy)}}
    (root / "mcp.json").write_text(json.dumps(servers))
    cmd = [claude, "-p", PROMPT, "--mcp-config", str(root / "mcp.json"), "--strict-mcp-config",
           "--allowedTools", TOOL, "--output-format", "stream-json", "--verbose"]
    env = clean_env(root / "home", f"http://127.0.0.1:{api.server_address[1]}")
    t0 = time.time()
    with open(root / "claude.out", "wb") as out, open(root / "claude.err", "wb") as err:
        rc = subprocess.run(cmd, cwd=root / "proj", env=env, stdout=out, stderr=err,
                            stdin=subprocess.DEVNULL, timeout=300).returncode
    seconds = time.time() - t0
    api.shutdown()
    api.server_close()
    print(f"{name}: claude exited {rc} after {seconds:.1f}s", file=sys.stderr)
    hooks = []
    for f in sorted((root / "proj" / "hook-out").glob("*.stdin")):
        stem = str(f)[: -len(".stdin")]
        label, ns, _ = Path(stem).name.split("@")
        hooks.append({"label": label, "t": int(ns) / 1e9, "stdin": f.read_bytes(),
                      "env": json.loads(Path(stem + ".env").read_text())["env"]})
    mcp = root / "mcp.jsonl"
    return {"root": root, "hooks": hooks, "seconds": seconds,
            "api": [json.loads(line) for line in (root / "api.jsonl").read_text().splitlines()],
            "mcp": mcp.read_bytes() if mcp.exists() else b"",
            "events": [json.loads(line) for line in (root / "claude.out").read_text().splitlines()
                       if line.startswith("{")]}


def last_user_message(run: Json) -> Any:
    """The last message of the last Messages request: what the model was told last."""
    return [e for e in run["api"] if isinstance(e.get("body"), dict)][-1]["body"]["messages"][-1]


def one(run: Json, label: str) -> Json:
    found: list[Json] = [h for h in run["hooks"] if h["label"] == label]
    assert len(found) == 1, (label, [h["label"] for h in run["hooks"]])
    return found[0]


def redact(env: dict[str, str]) -> dict[str, str]:
    def secret(name: str) -> bool:
        return any(word in name for word in ("TOKEN", "KEY", "SECRET"))

    return {k: "<redacted: per-run token>" if secret(k) else v for k, v in sorted(env.items())}


def probe_late(mcp_log: bytes) -> bool:
    """True when the client sent both server/discover and initialize (the probe was answered late)."""
    lines = [json.loads(line) for line in mcp_log.splitlines()]
    sent = [line["message"].get("method") for line in lines if line["dir"] == "c2s"]
    return "server/discover" in sent and "initialize" in sent


def write_json(path: Path, data: Any, indent: int = 2) -> None:
    path.write_text(json.dumps(data, indent=indent) + "\n")


def cmd_run(args: list[str]) -> int:
    claude, out = args[0], Path(args[1])
    work = Path(args[2] if len(args) > 2 else "/tmp/cc-capture/work")
    out.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([claude, "--version"], capture_output=True, text=True).stdout.strip()

    # 1. The hook payloads, the hooks' environment and the MCP exchange. A stdio server slow to start
    # answers the server/discover probe late, and Claude Code then tries initialize too (step 5):
    # up to 5 tries for a run without that race.
    for _ in range(5):
        run = session(claude, work, "record", SETTINGS)
        if not probe_late(run["mcp"]):
            break
    shutil.copy(run["root"] / "proj" / ".claude" / "settings.json", out / "settings.json")
    for event, stem in (("pre", "pre-tool-use"), ("post", "post-tool-use")):
        regex, exact = one(run, f"{event}-regex"), one(run, f"{event}-exact")
        assert regex["stdin"] == exact["stdin"], "the two matching hooks got different stdin"
        (out / f"{stem}.payload.json").write_bytes(regex["stdin"])
    write_json(out / "hook-env.json", {"claude_code": version,
                                       "PreToolUse": redact(one(run, "pre-regex")["env"]),
                                       "PostToolUse": redact(one(run, "post-regex")["env"])})
    (out / "mcp-exchange.jsonl").write_bytes(run["mcp"])
    # What Claude Code asked the API for (tools offered, tool results returned), and the MCP tool
    # as the model saw it.
    requests: list[Json] = []
    definition = None
    for e in run["api"]:
        body = e["body"] if isinstance(e.get("body"), dict) else {}
        tools = body.get("tools") or []
        last = body["messages"][-1] if body.get("messages") else {}
        last = last if isinstance(last.get("content"), list) else {}
        definition = next((t for t in tools if t.get("name") == TOOL), definition)
        requests.append({"method": e["method"], "path": e["path"], "model": body.get("model"),
                         "stream": body.get("stream"),
                         "tools": [t["name"] + " (defer_loading)" * bool(t.get("defer_loading"))
                                   for t in tools],
                         "tool_results": [b for b in last.get("content", [])
                                          if b.get("type") == "tool_result"]})
    write_json(out / "api-requests.json", {"claude_code": version, "requests": requests,
                                           "mcp_tool_definition": definition}, indent=1)

    # 2. A deny by exit code 2 and by JSON: what the model is told then.
    deny: Json = {"claude_code": version, "tool": TOOL}
    for mode in ("exit2", "json"):
        d = session(claude, work, f"deny-{mode}", DENY[mode])
        result = [e for e in d["events"] if e.get("type") == "result"]
        answer = {"exit_code": 2, "stderr": DENY_REASON + "\n"} if mode == "exit2" else {
            "exit_code": 0, "stdout": JSON_DENY}
        deny[mode] = {"settings": DENY[mode], "hook_answer": answer, "message_to_model": last_user_message(d),
                      "tools_call_reached_server": b'"tools/call"' in d["mcp"],
                      "post_tool_use_ran": any(h["label"] == "post" for h in d["hooks"]),
                      "result_permission_denials": result[-1].get("permission_denials") if result else None}
    deny["no_deny_for_comparison"] = {"message_to_model": last_user_message(run)}
    write_json(out / "deny-exchange.json", deny)

    # 3. Matchers: which of PROBES fire, for which tools (ToolSearch is called too, where it exists).
    m = session(claude, work, "matchers", PROBE)
    rows = [{"matcher": matcher, **{ev: sorted(json.loads(h["stdin"])["tool_name"] for h in m["hooks"]
                                                if h["label"] == f"{ev}-{i:02d}")
                                     for ev in ("PreToolUse", "PostToolUse")}}
            for i, matcher in enumerate(PROBES)]
    tools_called = sorted({json.loads(h["stdin"])["tool_name"] for h in m["hooks"]})
    write_json(out / "matchers.json", {"claude_code": version, "tools_called": tools_called,
                                       "null_means": "no matcher key", "probes": rows}, indent=1)

    # 4. Timeout: a PreToolUse hook with "timeout": 2 that sleeps 8 s.
    t = session(claude, work, "timeout", TIMEOUT)
    sleeper = one(t, "pre-sleep")
    time.sleep(8)  # time enough for a hook still alive to finish its sleep
    hook_out = t["root"] / "proj" / "hook-out"
    alive = max(f.stat().st_mtime for f in hook_out.glob("*.alive"))
    info = [{k: v for k, v in e.items() if k not in ("uuid", "session_id", "written_at")}
            for e in t["events"] if e.get("type") == "system" and e.get("subtype") == "informational"]
    write_json(out / "hook-timeout.json", {
        "claude_code": version, "settings": TIMEOUT,
        "hook_finished_its_sleep": any(hook_out.glob("*.woke")),
        "hook_ran_for_s": round(alive - sleeper["t"], 1),
        "tools_call_reached_server": b'"tools/call"' in t["mcp"],
        "hook_start_to_tool_result_s": round((t["root"] / "mcp.jsonl").stat().st_mtime - sleeper["t"], 1),
        "informational_events": info, "message_to_model": last_user_message(t)})

    # 5. The handshake when the server starts 5 s late (only for versions that probe with
    # server/discover: older ones send initialize alone and do not wait for the server), and
    # with a server that speaks only the initialize handshake (when its venv is there).
    if run["mcp"].startswith(b'{"dir": "c2s", "message": {"jsonrpc":"2.0","id":"server-discover-probe-'):
        slow = session(claude, work, "slow-start", {}, delay=5)
        (out / "mcp-exchange-slow-start.jsonl").write_bytes(slow["mcp"])
    if Path(LEGACY_SERVER).exists():
        legacy = session(claude, work, "legacy-server", {}, server=LEGACY_SERVER)
        (out / "mcp-exchange-legacy-server.jsonl").write_bytes(legacy["mcp"])

    # 6. `claude mcp list` (a health check of the configured servers) through the same proxy, the
    # server added the ordinary way, `claude mcp add -s user`. Up to 5 tries, as in 1.
    for _ in range(5):
        root = make_project(work, "mcp-list", {})
        env = clean_env(root / "home", "http://127.0.0.1:9")
        p = proxy_cmd(root / "mcp.jsonl")
        subprocess.run([claude, "mcp", "add", "-s", "user", "time", "--", p["command"], *p["args"]],
                       cwd=root / "proj", env=env, capture_output=True, check=True)
        listed = subprocess.run([claude, "mcp", "list"], cwd=root / "proj", env=env, capture_output=True,
                                text=True, stdin=subprocess.DEVNULL, timeout=120)
        time.sleep(1)  # the proxy's last lines
        if not probe_late((root / "mcp.jsonl").read_bytes()):
            break
    (out / "mcp-list-exchange.jsonl").write_bytes((root / "mcp.jsonl").read_bytes())
    (out / "mcp-list.txt").write_text(listed.stdout + listed.stderr)

    # 7. `claude doctor` (it lists invalid settings) on the project of step 1 and on one holding
    # INVALID. A version whose doctor is an interactive screen times out here: then none is kept.
    invalid = make_project(work, "invalid", INVALID)
    for proj, name in ((run["root"], "doctor.txt"), (invalid, "doctor-invalid-settings.txt")):
        try:
            doc = subprocess.run([claude, "doctor"], cwd=proj / "proj", capture_output=True, text=True,
                                 env=clean_env(proj / "home", "http://127.0.0.1:9"),
                                 stdin=subprocess.DEVNULL, timeout=60)
        except subprocess.TimeoutExpired:
            print(f"claude doctor did not finish: no {name}", file=sys.stderr)
            continue
        (out / name).write_text(doc.stdout + doc.stderr)
        if proj == invalid:
            write_json(out / "invalid-settings.json", INVALID)
    print(f"wrote the fixtures of {version} in {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit({"run": cmd_run, "proxy": cmd_proxy, "hook": cmd_hook}[sys.argv[1]](sys.argv[2:]))
