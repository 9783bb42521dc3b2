#!/usr/bin/env python3
"""Re-make the ToolFunnel 0.6 field fixtures (stdlib only).

Usage:
    python3 toolfunnel_capture.py TOOLFUNNEL_SRC [--out DIR] [--work DIR]

TOOLFUNNEL_SRC is either a ToolFunnel source checkout (a directory holding
bin/toolfunnel.js) or a git directory without work tree (its HEAD is exported
with `git archive`).  Nothing is run inside TOOLFUNNEL_SRC: the tree is copied
into the scratch WORK directory first.  OUT defaults to the directory holding
this script.  Needs `node` on PATH; no network.

What it makes (see NOTE.md):
    home/               the JSON/config files ToolFunnel wrote into a fresh
                        config home, plus the script of the tool added here
    home-files.json     manifest of every file in that home
    stdio/              a recorded run of ToolFunnel's test/stdio.test.js
                        (client sends Content-Length frames)
    stdio-ndjson/       a recorded run of ToolFunnel's demo/client.js
                        (client sends NDJSON lines)
    capture-info.json   commit, node version, date, per-step results

Internal mode (used by the recording shim, not by hand):
    python3 toolfunnel_capture.py relay DIR -- CMD [ARGS...]
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from types import FrameType
from typing import Any, NoReturn, cast

Json = dict[str, Any]

HERE = os.path.dirname(os.path.abspath(__file__))

# The script of the tool this capture adds through tf_tool_add (ours, not ToolFunnel's).
GREET_JS = """#!/usr/bin/env node
'use strict';
// greet.js - field-fixture tool: reads TOOLFUNNEL_TOOL_ARGS, prints one JSON line.
const args = JSON.parse(process.env.TOOLFUNNEL_TOOL_ARGS || 'null') || {};
const who = typeof args.name === 'string' && args.name ? args.name : 'world';
process.stdout.write(JSON.stringify({ ok: true, greeting: 'hello, ' + who }) + '\\n');
"""

GREET_TOOL: Json = {
    "id": "greet",
    "name": "Greet",
    "summary": "Say hello to someone.",
    "category": "field",
    "instructions": "Args: { name?: string }. Returns { ok, greeting }.",
    "inputSchema": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "additionalProperties": False,
    },
    "invoke": {"type": "script", "path": "scripts/greet.js"},
    "scriptText": GREET_JS,
}

MOCK_UPSTREAM: Json = {
    "id": "mock",
    "command": "node",
    "args": ["mcp/servers/mock-upstream/server.js"],
    "description": "ToolFunnel's bundled mock upstream (seeded into the home).",
    "expose": [{"tool": "ping", "as": "mock_ping", "category": "demo"}],
}

IDENTITY = {"serverName": "toolfunnel-field", "serverVersion": "0.6.0-field"}

# Written into WORK at run time; loaded with `node -r` into the test client ONLY
# (not into ToolFunnel).  It re-routes the client's spawn of bin/toolfunnel.js
# through `toolfunnel_capture.py relay`, which tees both pipes to files.
SPAWN_SHIM_JS = r"""'use strict';
const cp = require('child_process');
const path = require('path');
const cfg = JSON.parse(process.env.TF_CAPTURE_RELAY);
const orig = cp.spawn;
let n = 0;
cp.spawn = function (command, args, options) {
  if (Array.isArray(args) && typeof args[0] === 'string' &&
      args[0].endsWith(path.join('bin', 'toolfunnel.js'))) {
    const dir = path.join(cfg.outdir, String(n++));
    return orig.call(this, cfg.python, [cfg.script, 'relay', dir, '--', command, ...args], options);
  }
  return orig.apply(this, arguments);
};
"""

KEEP_EXT = (".json",)
# Seeded, but a copy of the example ToolFunnel ships, which no test reads: listed, not kept.
NOT_KEPT = ("mcp/expose.example.json",)


# ───────────────────────────── relay (recording shim) ─────────────────────────────

def relay_main(argv: list[str]) -> NoReturn:
    outdir = argv[0]
    assert argv[1] == "--"
    cmd = argv[2:]
    os.makedirs(outdir, exist_ok=True)
    with (
        open(os.path.join(outdir, "client-to-server.bin"), "wb", buffering=0) as c2s,
        open(os.path.join(outdir, "server-to-client.bin"), "wb", buffering=0) as s2c,
        open(os.path.join(outdir, "chunks.jsonl"), "w", buffering=1) as log,
    ):
        t0 = time.monotonic()
        lock = threading.Lock()
        offs = {"c2s": 0, "s2c": 0}

        def note(d: str, data: bytes) -> None:
            with lock:
                log.write(json.dumps({"dir": d, "t": round(time.monotonic() - t0, 6),
                                      "off": offs[d], "len": len(data)}) + "\n")
                offs[d] += len(data)

        with open(os.path.join(outdir, "argv.json"), "w") as f:
            json.dump({"argv": cmd, "cwd": os.getcwd()}, f)
        child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        child_in = child.stdin
        child_out = child.stdout
        assert child_in is not None and child_out is not None  # both are PIPEs

        def on_term(signum: int, _frame: FrameType | None) -> None:
            with contextlib.suppress(OSError):
                child.send_signal(signum)
        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)

        def write_all(fd: int, data: bytes) -> None:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]

        def pump_in() -> None:
            try:
                while True:
                    data = os.read(0, 65536)
                    if not data:
                        break
                    c2s.write(data)
                    note("c2s", data)
                    write_all(child_in.fileno(), data)
            except OSError:
                pass
            finally:
                with contextlib.suppress(OSError):
                    child_in.close()

        def pump_out() -> None:
            fd = child_out.fileno()
            try:
                while True:
                    data = os.read(fd, 65536)
                    if not data:
                        break
                    s2c.write(data)
                    note("s2c", data)
                    write_all(1, data)
            except OSError:
                pass

        ti = threading.Thread(target=pump_in, daemon=True)
        to = threading.Thread(target=pump_out)
        ti.start()
        to.start()
        rc = child.wait()
        to.join(5)
        # close in this order while the stdin pump may still run; the with block then closes nothing
        c2s.close()
        s2c.close()
        log.close()
    if rc < 0:  # mirror a signal death to the client
        signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
    os._exit(rc)


# ───────────────────────────── helpers ─────────────────────────────

def sh(cmd: list[str], **kw: Any) -> str:
    stdout: str = subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout
    return stdout.strip()


def export_source(src: str, dest: str) -> str | None:
    if os.path.exists(dest):
        shutil.rmtree(dest)
    os.makedirs(dest)
    if os.path.isfile(os.path.join(src, "bin", "toolfunnel.js")):
        shutil.copytree(src, dest, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".git", "node_modules"))
    else:
        arch = subprocess.run(["git", "-C", src, "archive", "HEAD"], check=True,
                              capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", dest], input=arch, check=True)
    try:
        commit = sh(["git", "-C", src, "rev-parse", "HEAD"])
    except (subprocess.CalledProcessError, FileNotFoundError):
        commit = None
    return commit


def snapshot(root: str) -> dict[str, Json]:
    out: dict[str, Json] = {}
    for dp, dns, fns in os.walk(root):
        dns.sort()
        for fn in sorted(fns):
            p = os.path.join(dp, fn)
            rel = os.path.relpath(p, root).replace(os.sep, "/")
            with open(p, "rb") as f:
                data = f.read()
            out[rel] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return out


class StdioClient:
    """Minimal NDJSON JSON-RPC client for driving ToolFunnel during the home capture."""

    def __init__(self, argv: list[str], cwd: str) -> None:
        self.p = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, start_new_session=True)
        self.next_id = 1
        self.responses: dict[int, Json] = {}
        self.cv = threading.Condition()
        self.stderr = bytearray()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._err, daemon=True).start()

    def _read(self) -> None:
        stdout = self.p.stdout
        assert stdout is not None  # a PIPE
        for line in stdout:
            line = line.strip()
            if not line:
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "id" in msg and ("result" in msg or "error" in msg):
                with self.cv:
                    self.responses[msg["id"]] = msg
                    self.cv.notify_all()

    def _err(self) -> None:
        stderr = cast(io.BufferedReader, self.p.stderr)  # a PIPE, buffered (bufsize -1)
        for chunk in iter(lambda: stderr.read1(4096), b""):
            self.stderr += chunk

    def notify(self, method: str, params: Json | None = None) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params or {}})

    def _send(self, obj: Json) -> None:
        stdin = self.p.stdin
        assert stdin is not None  # a PIPE
        stdin.write((json.dumps(obj) + "\n").encode())
        stdin.flush()

    def request(self, method: str, params: Json | None = None, timeout: float = 20) -> Json:
        rid = self.next_id
        self.next_id += 1
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}})
        deadline = time.monotonic() + timeout
        with self.cv:
            while rid not in self.responses:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(method + "\n" + self.stderr.decode(errors="replace"))
                self.cv.wait(left)
            return self.responses.pop(rid)

    def run_tool(self, name: str, args: Json) -> Json:
        r = self.request("tools/call", {"name": "toolfunnel_run_tool",
                                        "arguments": {"name": name, "args": args}})
        text = r["result"]["content"][0]["text"]
        is_err = bool(r["result"].get("isError"))
        try:
            outer = json.loads(text)
        except ValueError:
            return {"isError": is_err, "text": text}
        inner = None
        if isinstance(outer, dict) and isinstance(outer.get("stdout"), str) and outer["stdout"].strip():
            try:
                inner = json.loads(outer["stdout"].strip().splitlines()[-1])
            except ValueError:
                inner = None
        return {"isError": is_err, "outer": outer, "inner": inner}

    def close(self, grace: float = 3.0) -> Json:
        stdin = self.p.stdin
        assert stdin is not None  # a PIPE
        with contextlib.suppress(OSError):
            stdin.close()
        try:
            rc = self.p.wait(grace)
            how = "exited on stdin EOF"
        except subprocess.TimeoutExpired:
            # ToolFunnel 0.6 stays alive on stdin EOF while an upstream child is connected.
            os.killpg(self.p.pid, signal.SIGTERM)  # the process group created above
            rc = self.p.wait(10)
            how = f"still running {grace:.0f}s after stdin EOF; SIGTERM sent to its process group"
        return {"rc": rc, "how": how}


# ───────────────────────────── step 1: the home ─────────────────────────────

def capture_home(src: str, work: str, out: str, info: Json) -> None:
    node = shutil.which("node")
    assert node is not None  # main() has already run `node --version`
    entry = os.path.join(src, "bin", "toolfunnel.js")
    home = os.path.join(work, "home")
    if os.path.exists(home):
        shutil.rmtree(home)
    steps = info.setdefault("home_steps", [])

    # 1a. seed: start the stdio server on a fresh home, close stdin at once.
    r = subprocess.run([node, entry, "--config-dir", home], cwd=work, stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=30)
    steps.append({"step": "seed", "cmd": "node bin/toolfunnel.js --config-dir HOME </dev/null",
                  "rc": r.returncode})
    seeded = snapshot(home)

    # 1b. manage over MCP (stdio, NDJSON): tf_tool_add, tf_mcp_add, tf_tool_set.
    c = StdioClient([node, entry, "--config-dir", home], cwd=home)
    init = c.request("initialize", {"protocolVersion": "2024-11-05", "capabilities": {},
                                    "clientInfo": {"name": "field-capture", "version": "0.0.0"}})
    c.notify("notifications/initialized")
    steps.append({"step": "initialize", "serverInfo": init["result"]["serverInfo"]})

    def record(step: str, name: str, args: Json | None, res: Json) -> Json:
        inner: object = res.get("inner")
        steps.append({"step": step, "tool": name, "isError": res["isError"],
                      "ok": inner.get("ok") if isinstance(inner, dict) else None,
                      "error": inner.get("error") if isinstance(inner, dict) else res.get("text")})
        if not (isinstance(inner, dict) and inner.get("ok")):
            raise RuntimeError(f"{name} failed: {res!r}\n{c.stderr.decode(errors='replace')}")
        return inner

    add = record("tool_add", "tf_tool_add", GREET_TOOL, c.run_tool("tf_tool_add", GREET_TOOL))
    info["tf_tool_add_result_keys"] = sorted(add.keys())
    record("mcp_add", "tf_mcp_add", MOCK_UPSTREAM, c.run_tool("tf_mcp_add", MOCK_UPSTREAM))
    record("tool_set", "tf_tool_set", None,
           c.run_tool("tf_tool_set", {"id": "greet", "action": "hot"}))

    # the running gateway hot-reloads the register and expose.json: check both took.
    g = c.run_tool("greet", {"name": "field"})
    steps.append({"step": "run greet", "isError": g["isError"], "inner": g.get("inner")})
    ping: Json | None = None
    for _ in range(40):
        ping = c.run_tool("mock_ping", {})
        if not ping["isError"]:
            break
        time.sleep(0.25)
    assert ping is not None  # the loop ran at least once
    steps.append({"step": "run mock_ping", "isError": ping["isError"],
                  "result": ping.get("outer", ping.get("text"))})
    steps.append({"step": "stop stdio server", **c.close()})

    # 1c. identity (toolfunnel.json) through ToolFunnel's config UI, loopback, OS port.
    ui = subprocess.Popen([node, entry, "--config-dir", home, "--ui", "--port", "0"], cwd=home,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, start_new_session=True)
    ui_err = ui.stderr
    assert ui_err is not None  # a PIPE
    url = None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and url is None:
        line = ui_err.readline().decode(errors="replace")
        m = re.search(r"config UI listening on (http://\S+)", line)
        if m:
            url = m.group(1)
    try:
        if not url:
            raise RuntimeError("UI did not start")
        req = urllib.request.Request(url + "/api/identity", data=json.dumps(IDENTITY).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = json.loads(resp.read())
        steps.append({"step": "POST /api/identity", "status": resp.status, "ok": body.get("ok"),
                      "body": IDENTITY})
    finally:
        ui.send_signal(signal.SIGTERM)
        steps.append({"step": "stop UI", "rc": ui.wait(10)})

    # 1d. manifest + kept files.
    final = snapshot(home)
    manifest: list[Json] = []
    kept_dir = os.path.join(out, "home")
    if os.path.exists(kept_dir):
        shutil.rmtree(kept_dir)
    ours = "tools/scripts/" + os.path.basename(GREET_TOOL["invoke"]["path"])
    for rel, meta in sorted(final.items()):
        kept = (rel.endswith(KEEP_EXT) and rel not in NOT_KEPT) or rel == ours
        manifest.append({"path": rel, "bytes": meta["bytes"], "sha256": meta["sha256"],
                         "kept": kept, "seeded": rel in seeded,
                         "changed_after_seed": rel in seeded and seeded[rel] != meta})
        if kept:
            dst = os.path.join(kept_dir, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(os.path.join(home, rel), dst)
    gone = sorted(set(seeded) - set(final))
    with open(os.path.join(out, "home-files.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    info["home_files_removed_after_seed"] = gone
    info["home_file_modes"] = {rel: oct(os.stat(os.path.join(home, rel)).st_mode & 0o777)
                               for rel in final if rel.endswith(".json") or rel == ours}


# ───────────────────────────── step 2: stdio exchanges ─────────────────────────────

def split_frames(data: bytes) -> list[tuple[str, int, int]]:
    """Split a byte stream into wire messages as they were framed."""
    msgs: list[tuple[str, int, int]] = []
    i = 0
    n = len(data)
    while i < n:
        m = re.match(rb"Content-Length:\s*(\d+)[^\r\n]*\r\n(?:[^\r\n]*\r\n)*?\r\n", data[i:], re.I)
        if m:
            end = i + m.end() + int(m.group(1))
            msgs.append(("content-length", i, end))
            i = end
            continue
        nl = data.find(b"\n", i)
        end = n if nl == -1 else nl + 1
        if data[i:end].strip():
            msgs.append(("ndjson", i, end))
        else:
            # stray whitespace between messages: keep it visible as its own entry
            msgs.append(("whitespace", i, end))
        i = end
    return msgs


def build_exchange(rec_dir: str) -> tuple[list[Json], list[Json]]:
    streams: dict[str, bytes] = {}
    for d, fn in (("c2s", "client-to-server.bin"), ("s2c", "server-to-client.bin")):
        with open(os.path.join(rec_dir, fn), "rb") as fb:
            streams[d] = fb.read()
    with open(os.path.join(rec_dir, "chunks.jsonl")) as f:
        chunks: list[Json] = [json.loads(line) for line in f]

    def t_of(d: str, last_byte: int) -> float:
        for ch in chunks:
            if ch["dir"] == d and ch["off"] <= last_byte < ch["off"] + ch["len"]:
                t: float = ch["t"]
                return t
        return float("inf")

    items: list[Json] = []
    for d, data in streams.items():
        for framing, a, b in split_frames(data):
            raw = data[a:b]
            try:
                text = raw.decode("utf-8")
                enc = "text"
            except UnicodeDecodeError:
                text = base64.b64encode(raw).decode()
                enc = "base64"
            items.append({"dir": d, "framing": framing, "offset": a, "bytes": b - a,
                          "encoding": enc, "raw": text, "_t": t_of(d, b - 1)})
    items.sort(key=lambda x: (x["_t"], 0 if x["dir"] == "c2s" else 1, x["offset"]))
    for k, it in enumerate(items):
        it.pop("_t")
        it["seq"] = k
    return items, chunks


def scrub(arg: str, src: str) -> str:
    node = shutil.which("node")
    assert node is not None  # main() has already run `node --version`
    if arg == node or arg == os.path.realpath(node):
        return "node"
    if arg.startswith(src + os.sep):
        return os.path.relpath(arg, src)
    if os.path.isabs(arg):
        return "<temp dir>"
    return arg


def capture_client(src: str, work: str, out: str, info: Json, client_rel: str, name: str) -> None:
    rec = os.path.join(work, "rec-" + name)
    if os.path.exists(rec):
        shutil.rmtree(rec)
    os.makedirs(rec)
    shim = os.path.join(work, "spawn-shim.js")
    with open(shim, "w") as f:
        f.write(SPAWN_SHIM_JS)
    env = dict(os.environ)
    env["TF_CAPTURE_RELAY"] = json.dumps({"python": sys.executable,
                                          "script": os.path.abspath(__file__), "outdir": rec})
    node = shutil.which("node")
    assert node is not None  # main() has already run `node --version`
    r = subprocess.run([node, "-r", shim, client_rel], cwd=src, env=env,
                       capture_output=True, text=True, timeout=120)
    rec0 = os.path.join(rec, "0")
    with open(os.path.join(rec0, "argv.json")) as f:
        argv = json.load(f)
    items, chunks = build_exchange(rec0)
    dst = os.path.join(out, name)
    if os.path.exists(dst):
        shutil.rmtree(dst)
    os.makedirs(dst)
    for fn in ("client-to-server.bin", "server-to-client.bin"):
        shutil.copyfile(os.path.join(rec0, fn), os.path.join(dst, fn))
    with open(os.path.join(dst, "exchange.json"), "w") as f:
        json.dump(items, f, indent=1, ensure_ascii=False)
        f.write("\n")

    def s(d: str) -> list[str]:
        return sorted({i["framing"] for i in items if i["dir"] == d})

    info.setdefault("exchanges", {})[name] = {
        "client": client_rel, "client_rc": r.returncode,
        "client_stdout_tail": re.sub(r"\x1b\[[0-9;]*m", "", r.stdout).strip().splitlines()[-2:],
        "spawned_argv": [scrub(x, src) for x in argv["argv"]],
        "c2s_framings": s("c2s"), "s2c_framings": s("s2c"),
        "c2s_chunks": sum(1 for c in chunks if c["dir"] == "c2s"),
        "s2c_chunks": sum(1 for c in chunks if c["dir"] == "s2c"),
        "messages": len(items),
    }


# ───────────────────────────── main ─────────────────────────────

def main(argv: list[str]) -> None:
    if argv and argv[0] == "relay":
        relay_main(argv[1:])  # never returns
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source")
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--work", default=None, help="scratch dir (default: a new temp dir)")
    a = ap.parse_args(argv)
    work = os.path.abspath(a.work) if a.work else tempfile.mkdtemp(prefix="tf-capture-")
    out = os.path.abspath(a.out)
    os.makedirs(work, exist_ok=True)
    os.makedirs(out, exist_ok=True)
    src = os.path.join(work, "src")
    commit = export_source(os.path.abspath(a.source), src)
    with open(os.path.join(src, "package.json")) as f:
        version = json.load(f).get("version")
    info: Json = {
        "toolfunnel_commit": commit,
        "toolfunnel_version": version,
        "node": sh(["node", "--version"]),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    capture_home(src, work, out, info)
    capture_client(src, work, out, info, "test/stdio.test.js", "stdio")
    capture_client(src, work, out, info, "demo/client.js", "stdio-ndjson")
    with open(os.path.join(out, "capture-info.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
