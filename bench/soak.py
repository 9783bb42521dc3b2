"""Soak: mixed traffic against a stdio and an HTTP gateway for a while; report leaks and orphans.

Two gateways (`serve` over stdio and `serve --http`) on one throwaway home, each with the mock
upstream, are driven at once by: legacy and modern calls over both transports, calls cancelled
mid-flight (`notifications/cancelled` on stdio, a dropped connection over HTTP), upstream
crashes (`mock_crash`, the upstream restarts), daemons started by the upstream (`mock_spawn`
with `setsid`), and config edits (a visibility toggle, and a half-written file that must be
refused). At the start (after a warm-up) and at the end it samples each gateway's RSS, open fds
and threads; every failure is counted by kind, and a kind that the traffic does not explain is
listed as unexplained. After both gateways have stopped, every process still carrying the home's
path in its environment is an orphan: it is listed, then killed.

    .venv/bin/python bench/soak.py --minutes 10          # the run bench/README.md reports
    .venv/bin/python bench/soak.py --minutes 0.5         # a smoke run

Exit status: 0 when nothing leaked (fds and threads back where they started, RSS within
`--rss-slack-kib`), no orphan was found and no error is unexplained; 1 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.peer import Peer, PeerError  # noqa: E402
from tfunnel.config.home import seed_dir, seed_home  # noqa: E402

MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "soak", "version": "1"},
}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
WARMUP_S = 5.0
# Failures the traffic itself causes: calls that meet an upstream while it crashes or restarts.
EXPLAINED = (
    "exited with status",
    "is restarting",
    "is still starting",
    "is backoff",
    "closed its output",
    "is not reading its input",
    "cancelled",
)
_URL = re.compile(rb'"urls": \["(http://[^"]+)"')


@dataclass
class Sample:
    rss_kib: int
    fds: int
    threads: int


@dataclass
class Tally:
    ops: collections.Counter[str] = field(default_factory=collections.Counter)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    unexplained: list[str] = field(default_factory=list)

    def failed(self, where: str, text: str) -> None:
        kind = next((k for k in EXPLAINED if k in text), None)
        if kind is None:
            self.errors[f"{where}: unexplained"] += 1
            if len(self.unexplained) < 20:
                self.unexplained.append(f"{where}: {text[:300]}")
        else:
            self.errors[f"{where}: {kind}"] += 1


def sample(pid: int) -> Sample:
    status = Path(f"/proc/{pid}/status").read_text()
    values = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return Sample(
        rss_kib=int(values["VmRSS"].split()[0]),
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        threads=int(values["Threads"]),
    )


def prepare(home: Path) -> None:
    seed_home(home, seed_dir())
    mock = [
        sys.executable,
        "-m",
        "tfunnel.testing.mock_upstream",
        "--tools",
        "echo,slow,crash,spawn,progress",
    ]
    (home / "mcp" / "expose.json").write_text(
        json.dumps(
            {
                "version": 1,
                "expose": [],
                "upstreams": [
                    {
                        "id": "mock",
                        "command": mock[0],
                        "args": mock[1:],
                        "restart": {
                            "initialBackoffS": 0.2,
                            "maxBackoffS": 1,
                            "maxRestarts": 1000,
                            "windowS": 60,
                        },
                    }
                ],
            }
        )
    )
    manifest = json.loads((home / "hooks" / "hooks.manifest.json").read_text())
    manifest["hooks"].append(
        {
            "id": "soak/allow",
            "event": "PreToolUse",
            "matcher": "hash|mock_echo",
            "type": "command",
            "command": "true",
            "enabled": True,
        }
    )
    (home / "hooks" / "hooks.manifest.json").write_text(json.dumps(manifest))


def run_tool(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": "toolfunnel_run_tool", "arguments": {"name": name, "args": args}}


async def guarded(tally: Tally, where: str, work: Awaitable[dict[str, Any]]) -> None:
    """Await one operation, counting it and any failure by kind."""
    tally.ops[where] += 1
    try:
        result = await work
    except (PeerError, httpx2.HTTPError, trio.BrokenResourceError, ValueError, KeyError) as exc:
        tally.failed(where, f"{type(exc).__name__}: {exc}")
        return
    if result.get("isError"):
        tally.failed(where, json.dumps(result.get("content"))[:400])


async def stdio_traffic(peer: Peer, tally: Tally, deadline: float) -> None:
    n = 0
    while trio.current_time() < deadline:
        n += 1
        await guarded(tally, "stdio legacy", peer.request("tools/call", run_tool("hash", {"text": str(n)})))
        await guarded(
            tally,
            "stdio upstream",
            peer.request("tools/call", run_tool("mock_echo", {"text": "soak"})),
        )
        await guarded(
            tally,
            "stdio modern",
            peer.request("tools/call", {**run_tool("hash", {"text": "m"}), "_meta": META}),
        )
        if n % 25 == 0:  # a slow call, cancelled mid-flight: no answer may come
            tally.ops["stdio cancel"] += 1
            with trio.move_on_after(0.2):
                await peer.request("tools/call", run_tool("mock_slow", {"seconds": 5}))
            await peer.notify("notifications/cancelled", {"requestId": peer._next_id, "reason": "soak"})


async def open_session(http: httpx2.AsyncClient, url: str, client: str) -> dict[str, str]:
    """A legacy Streamable HTTP session; the headers its requests carry."""
    init = await http.post(
        f"{url}/mcp",
        headers=ACCEPT,
        json={
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": client, "version": "1"},
            },
        },
    )
    return {**ACCEPT, "mcp-session-id": init.headers["mcp-session-id"]}


async def http_traffic(url: str, tally: Tally, deadline: float) -> None:
    async with httpx2.AsyncClient(timeout=30) as http:
        session = await open_session(http, url, "soak")
        n = 0

        async def post(message: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
            reply = await http.post(f"{url}/mcp", headers=headers, json=message)
            body: dict[str, Any] = reply.json()
            if "error" in body:
                raise ValueError(f"HTTP {reply.status_code}: {body['error']}")
            result: dict[str, Any] = body["result"]
            return result

        while trio.current_time() < deadline:
            n += 1
            await guarded(
                tally,
                "http legacy",
                post(
                    {
                        "jsonrpc": "2.0",
                        "id": n,
                        "method": "tools/call",
                        "params": run_tool("hash", {"text": "h"}),
                    },
                    session,
                ),
            )
            await guarded(
                tally,
                "http upstream",
                post(
                    {
                        "jsonrpc": "2.0",
                        "id": n,
                        "method": "tools/call",
                        "params": run_tool("mock_echo", {"text": "h"}),
                    },
                    session,
                ),
            )
            modern = {
                **ACCEPT,
                "mcp-protocol-version": MODERN,
                "mcp-method": "tools/call",
                "mcp-name": "toolfunnel_run_tool",
            }
            await guarded(
                tally,
                "http modern",
                post(
                    {
                        "jsonrpc": "2.0",
                        "id": n,
                        "method": "tools/call",
                        "params": {**run_tool("hash", {"text": "m"}), "_meta": META},
                    },
                    modern,
                ),
            )
            if n % 25 == 0:  # a slow call whose client gives up: the dropped connection cancels it
                tally.ops["http cancel"] += 1
                async with httpx2.AsyncClient(timeout=0.3) as impatient:
                    with contextlib.suppress(httpx2.HTTPError):
                        await impatient.post(
                            f"{url}/mcp",
                            headers=session,
                            json={
                                "jsonrpc": "2.0",
                                "id": f"c{n}",
                                "method": "tools/call",
                                "params": run_tool("mock_slow", {"seconds": 5}),
                            },
                        )


async def chaos(peer: Peer, url: str, home: Path, tally: Tally, deadline: float) -> None:
    """Upstream crashes and daemons on both gateways, config edits on the shared home."""
    state = home / "tools" / "tools.state.json"
    tick = 0
    async with httpx2.AsyncClient(timeout=30) as http:
        session = await open_session(http, url, "chaos")
        while trio.current_time() < deadline:
            await trio.sleep(1)
            tick += 1
            if tick % 7 == 0:
                tally.ops["chaos daemon"] += 1
                with contextlib.suppress(PeerError):
                    await peer.request("tools/call", run_tool("mock_spawn", {"setsid": True}))
                await http.post(
                    f"{url}/mcp",
                    headers=session,
                    json={
                        "jsonrpc": "2.0",
                        "id": tick,
                        "method": "tools/call",
                        "params": run_tool("mock_spawn", {"setsid": True}),
                    },
                )
            if tick % 15 == 0:
                tally.ops["chaos crash"] += 1
                with contextlib.suppress(PeerError):
                    await peer.request("tools/call", run_tool("mock_crash", {}))
                await http.post(
                    f"{url}/mcp",
                    headers=session,
                    json={
                        "jsonrpc": "2.0",
                        "id": f"x{tick}",
                        "method": "tools/call",
                        "params": run_tool("mock_crash", {}),
                    },
                )
            if tick % 5 == 0:
                tally.ops["chaos config edit"] += 1
                state.write_text(json.dumps({"hash": {"hot": tick % 10 == 0}}))
            if tick % 31 == 0:  # half a file: refused, the last good one stays
                tally.ops["chaos broken file"] += 1
                state.write_text('{"hash": {"hot": tr')
                await trio.sleep(1)
                state.write_text("{}")


def orphans_of(home: Path) -> list[tuple[int, str]]:
    """Live processes whose environment names `home`: after the gateways stopped, leftovers."""
    marker = f"TFUNNEL_HOME={home}".encode()
    found: list[tuple[int, str]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] != "Z":
            found.append(
                (int(entry.name), (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:120])
            )
    return found


async def soak(minutes: float, rss_slack_kib: int) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="tfunnel-soak-")) / "home"
    prepare(home)
    argv = [sys.executable, "-m", "tfunnel", "--home", str(home), "--log-level", "warning"]
    tally = Tally()
    stdio = await trio.lowlevel.open_process(
        [*argv, "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    http_proc = await trio.lowlevel.open_process(
        [*argv, "--log-level", "info", "serve", "--http", "--port", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    peer = Peer(stdio)
    started = time.monotonic()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(peer._read_stdout)
        buffered = bytearray()
        assert http_proc.stderr is not None
        while not (match := _URL.search(buffered)):
            chunk = await http_proc.stderr.receive_some(65536)
            if not chunk:
                raise SystemExit("the HTTP gateway did not start")
            buffered += chunk
        url = match.group(1).decode()

        async def drain() -> None:
            assert http_proc.stderr is not None
            while await http_proc.stderr.receive_some(65536):
                pass

        nursery.start_soon(drain)
        await peer.initialize()
        await peer.wait_for_tool("toolfunnel_run_tool")
        deadline = trio.current_time() + WARMUP_S
        async with trio.open_nursery() as warm:
            warm.start_soon(stdio_traffic, peer, Tally(), deadline)
            warm.start_soon(http_traffic, url, Tally(), deadline)
        before = {"stdio": sample(stdio.pid), "http": sample(http_proc.pid)}
        deadline = trio.current_time() + minutes * 60
        async with trio.open_nursery() as load:
            load.start_soon(stdio_traffic, peer, tally, deadline)
            load.start_soon(http_traffic, url, tally, deadline)
            load.start_soon(chaos, peer, url, home, tally, deadline)
        await trio.sleep(3)  # let the last restarts and cancelled calls settle
        after = {"stdio": sample(stdio.pid), "http": sample(http_proc.pid)}
        # Stop both as their users would: stdin EOF, SIGTERM.
        assert stdio.stdin is not None
        await stdio.stdin.aclose()
        http_proc.send_signal(signal.SIGTERM)
        with trio.move_on_after(30):
            codes = (await stdio.wait(), await http_proc.wait())
        nursery.cancel_scope.cancel()
    await trio.sleep(1)
    orphans = orphans_of(home)
    for pid, _ in orphans:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    leaks = [
        f"{name}: {what} {getattr(before[name], what)} -> {getattr(after[name], what)}"
        for name in before
        for what in ("fds", "threads")
        if getattr(after[name], what) > getattr(before[name], what)
    ]
    leaks += [
        f"{name}: rss {before[name].rss_kib} -> {after[name].rss_kib} KiB"
        for name in before
        if after[name].rss_kib - before[name].rss_kib > rss_slack_kib
    ]
    return {
        "minutes": minutes,
        "wall_s": round(time.monotonic() - started, 1),
        "exit_codes": {"stdio": codes[0], "http": codes[1]},
        "before": {k: asdict(v) for k, v in before.items()},
        "after": {k: asdict(v) for k, v in after.items()},
        "ops": dict(tally.ops),
        "errors": dict(tally.errors),
        "unexplained": tally.unexplained,
        "orphans": [f"{pid} {cmd}" for pid, cmd in orphans],
        "leaks": leaks,
    }


def report(result: dict[str, Any]) -> str:
    lines = [
        f"soak: {result['minutes']} min of traffic ({result['wall_s']} s in all); exit codes "
        f"stdio {result['exit_codes']['stdio']}, http {result['exit_codes']['http']}",
        "",
        "| gateway | RSS start → end (KiB) | fds start → end | threads start → end |",
        "|---|---|---|---|",
    ]
    for name in ("stdio", "http"):
        b, a = result["before"][name], result["after"][name]
        lines.append(
            f"| {name} | {b['rss_kib']} → {a['rss_kib']} | {b['fds']} → {a['fds']} | "
            f"{b['threads']} → {a['threads']} |"
        )
    lines += ["", "| operation | count |", "|---|---|"] + [
        f"| {k} | {v} |" for k, v in sorted(result["ops"].items())
    ]
    lines += ["", "| failures by kind | count |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(result["errors"].items())] or ["| (none) | 0 |"]
    lines += [
        "",
        f"orphans found: {len(result['orphans'])}",
        f"leaks: {result['leaks'] or 'none'}",
        f"unexplained errors: {len(result['unexplained'])}",
    ]
    lines += [f"  {line}" for line in result["unexplained"]] + [f"  orphan: {o}" for o in result["orphans"]]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument(
        "--rss-slack-kib",
        type=int,
        default=8192,
        help="RSS growth allowed from the warm start to the end (default 8 MiB)",
    )
    p.add_argument("--json", type=Path, help="also write the result here")
    args = p.parse_args()
    result = trio.run(soak, args.minutes, args.rss_slack_kib)
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    bad = result["orphans"] or result["leaks"] or result["unexplained"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
