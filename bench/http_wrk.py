"""The HTTP face under wrk: the server's CPU per call, with a client that costs next to nothing.

    python bench/http_wrk.py [--rounds 3] [--seconds 5] [--connections 4] [--before TREE] [--json out.json]
    python bench/http_wrk.py --quick            # one round of 1 s per target

`bench/run.py`'s HTTP face drives the servers with the bench's Python client, which shares the 2
cores with them and costs about as much CPU per call as they do. Here `wrk` (Debian's package:
C, one thread) sends the calls, so the servers' own cost per call shows: the bare hypercorn
relay (`bench/http_relay.py`), `tfunnel serve --http` with a legacy (session) and a modern
(2026-07-28, stateless) client, each on the fast upstream; with `--before TREE` the same two
clients against the gateway built from another checkout (a worktree of an earlier commit), on
its own home. Per round the targets take turns, `--seconds` of wrk each at `--connections`;
every answer is checked (status 200, the echo's text, no error; a modern result complete).

Reported per target, median [min-max] over rounds: calls/s, wrk's p50 and p99, the server's
CPU per call (its process alone, from /proc; the upstream is another process), and each ratio to
the relay of the same round.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import trio
from http_peer import HttpPeer, running_http
from peer import cpu_seconds
from report import table
from targets import FAST, HTTP_RELAY, PYTHON, compile_bytecode, http_gateway_argv, prepare_home

ECHO = "hello from tfunnel-bench"
MODERN_META = ('"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
               '"io.modelcontextprotocol/clientCapabilities":{},'
               '"io.modelcontextprotocol/clientInfo":{"name":"tfunnel-bench","version":"1"}}')


@dataclass(frozen=True)
class Server:
    name: str
    argv: tuple[str, ...]
    era: str  # "plain" (the relay), "legacy" or "modern"
    tool: str  # the tool the calls name


@dataclass
class Rounds:
    rate: list[float] = field(default_factory=list)
    p50_us: list[float] = field(default_factory=list)
    p99_us: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)
    failed: int = 0


def servers(home: Path, before: tuple[Path, Path] | None) -> list[Server]:
    relay = Server("http/relay", (PYTHON, str(HTTP_RELAY), *FAST.argv), "plain", "echo")
    gateway = http_gateway_argv(home)
    out = [relay, Server("http/legacy", gateway, "legacy", "fast_echo"),
           Server("http/modern", gateway, "modern", "fast_echo")]
    if before is not None:
        tree, its_home = before
        # `-P`: with `-m`, Python would put the working directory first on the path.
        old = ("env", f"PYTHONPATH={tree}", PYTHON, "-P", *http_gateway_argv(its_home)[1:])
        out += [Server("before/legacy", old, "legacy", "fast_echo"),
                Server("before/modern", old, "modern", "fast_echo")]
    return out


def wrk_script(server: Server, session: str | None) -> str:
    """A wrk script: one tools/call per request, each with its own id; an answer that is not a
    200 with the echo's text and no error (modern: a complete result) counts as failed."""
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    meta = ""
    if server.era == "legacy":
        headers |= {"mcp-session-id": session or "", "mcp-protocol-version": "2025-06-18"}
    elif server.era == "modern":
        headers |= {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": server.tool}
        meta = "," + MODERN_META
    complete = '"resultType":"complete"' if server.era == "modern" else ECHO
    lines = ['wrk.method = "POST"', *(f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()),
             "local threads = {}", "function setup(thread) table.insert(threads, thread) end",
             "function init(args) failed = 0; counter = 0 end",
             "function request()", "  counter = counter + 1",
             f"  return wrk.format(nil, nil, nil, '{{\"jsonrpc\":\"2.0\",\"id\":' .. counter .. "
             f"',\"method\":\"tools/call\",\"params\":{{\"name\":\"{server.tool}\","
             f"\"arguments\":{{\"text\":\"{ECHO}\"}}{meta}}}}}')",
             "end",
             "function response(status, headers, body)",
             f"  if status ~= 200 or not body:find('{ECHO}', 1, true) or not body:find('{complete}', 1, true)"
             " or body:find('\"isError\":true', 1, true) or body:find('\"error\":', 1, true) then",
             "    failed = failed + 1", "  end", "end",
             "function done(summary, latency, requests)", "  local total = 0",
             "  for _, thread in ipairs(threads) do total = total + thread:get('failed') end",
             "  io.write(string.format('failed %d\\n', total))",
             "  io.write(string.format('p50 %d\\n', latency:percentile(50)))",
             "  io.write(string.format('p99 %d\\n', latency:percentile(99)))",
             "end"]
    return "\n".join(lines) + "\n"


@contextlib.asynccontextmanager
async def started(chosen: Sequence[Server], work: Path) -> AsyncIterator[dict[str, tuple[HttpPeer, Path]]]:
    """Each server running (a legacy one with its session open), with its wrk script."""
    async with contextlib.AsyncExitStack() as stack:
        out: dict[str, tuple[HttpPeer, Path]] = {}
        for server in chosen:
            peer = await stack.enter_async_context(running_http(server.argv, 1, era=server.era))
            await peer.initialize()
            script = work / (server.name.replace("/", "-") + ".lua")
            script.write_text(wrk_script(server, _session_of(peer)))
            out[server.name] = (peer, script)
        yield out


def _session_of(peer: HttpPeer) -> str | None:
    return peer._headers.get("mcp-session-id")  # the bench's own client


async def wrk_turn(peer: HttpPeer, script: Path, seconds: float, connections: int, out: Rounds) -> None:
    wrk = shutil.which("wrk")
    assert wrk is not None
    before, clock = cpu_seconds(peer.pid), time.perf_counter()
    done = await trio.run_process([wrk, "-t1", f"-c{connections}", f"-d{seconds:g}s", "-s", str(script),
                                   f"{peer.url}/mcp"], capture_stdout=True, capture_stderr=True)
    used, wall = cpu_seconds(peer.pid) - before, time.perf_counter() - clock
    text = done.stdout.decode()
    values = dict(line.split(None, 1) for line in text.splitlines() if line[:4] in ("fail", "p50 ", "p99 "))
    requests = next(int(line.split()[0]) for line in text.splitlines() if " requests in " in line)
    # The script counts every answer that is not good (a non-2xx status too); wrk itself counts
    # the requests that got none: "Socket errors: connect N, read N, write N, timeout N".
    errors = [line for line in text.splitlines() if "Socket errors:" in line]
    out.failed += int(values["failed"]) + sum(int(n) for line in errors
                                                 for n in re.findall(r"\d+", line.split(":", 1)[1]))
    out.rate.append(requests / wall)
    out.p50_us.append(float(values["p50"]))
    out.p99_us.append(float(values["p99"]))
    out.cpu_us.append(used / max(requests, 1) * 1e6)


async def run(chosen: Sequence[Server], rounds: int, seconds: float, connections: int,
              work: Path) -> dict[str, Rounds]:
    results = {server.name: Rounds() for server in chosen}
    async with started(chosen, work) as running:
        for number in range(rounds):
            for name, (peer, script) in running.items():
                await wrk_turn(peer, script, seconds, connections, results[name])
                got = results[name]
                print(f"round {number + 1}/{rounds} {name:14s} {got.rate[-1]:7.0f} calls/s  "
                      f"p50 {got.p50_us[-1]:6.0f} µs  CPU {got.cpu_us[-1]:5.0f} µs/call", file=sys.stderr)
    return results


def _spread(values: Sequence[float], fmt: str) -> str:
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"


def report(results: dict[str, Rounds]) -> str:
    relay = results["http/relay"]
    metrics = (("calls/s", "rate", ".0f"), ("p50 (µs)", "p50_us", ".0f"), ("p99 (µs)", "p99_us", ".0f"),
               ("server CPU per call (µs)", "cpu_us", ".0f"))
    rows = [[label, *(_spread(getattr(r, attr), fmt) for r in results.values())]
            for label, attr, fmt in metrics]
    rows.append(["failed answers", *(str(r.failed) for r in results.values())])
    ratios = []
    for label, attr, _ in metrics:
        row = [f"{label} / relay"]
        for rounds in list(results.values())[1:]:
            row.append(_spread([a / b for a, b in zip(getattr(rounds, attr), getattr(relay, attr),
                                                      strict=True)], ".2f"))
        ratios.append(row)
    return (table(["metric", *results], rows)
            + "\n\nRatios to the relay within each round, median [min-max]:\n\n"
            + table(["metric", *list(results)[1:]], ratios))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="The HTTP face under wrk: server CPU per call, side by side.")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=5.0, help="wrk's duration per target per round")
    p.add_argument("--connections", type=int, default=4, help="wrk's connections (default 4)")
    p.add_argument("--before", type=Path, help="also the gateway from this checkout (e.g. a worktree)")
    p.add_argument("--quick", action="store_true", help="1 round of 1 s per target")
    p.add_argument("--json", type=Path, help="also write every number here")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds = 1, 1.0
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("wrk") is None:
        print("http_wrk: needs wrk (Debian package wrk; scripts/test installs it)", file=sys.stderr)
        return 1
    compile_bytecode()
    with tempfile.TemporaryDirectory(prefix="tfunnel-http-wrk-") as tmp:
        work = Path(tmp)
        prepare_home(work / "home", FAST)
        before = None
        if args.before is not None:
            prepare_home(work / "before-home", FAST, args.before.resolve())
            compile_bytecode(args.before.resolve() / "tfunnel")
            before = (args.before.resolve(), work / "before-home")
        chosen = servers(work / "home", before)
        try:
            results = trio.run(run, chosen, args.rounds, args.seconds, args.connections, work)
        except KeyboardInterrupt:
            return 130
    print(f"wrk -t1 -c{args.connections}, {args.seconds:g} s per target per round, {args.rounds} round(s); "
          f"{os.cpu_count()} CPUs\n")
    print(report(results))
    if args.json is not None:
        args.json.write_text(json.dumps({name: vars(r) for name, r in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
