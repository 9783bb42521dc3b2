"""What a PreToolUse hook adds to a gated forwarded call: no hook, a command hook, an http hook.

Three `tfunnel serve` gateways, each in front of the fast Node.js upstream (`fast_upstream.mjs`),
each on a home of its own that differs only in its hook manifest:

    no hook        client -> tfunnel serve -> node fast_upstream.mjs; tools/call "fast_echo"
    command hook   the same, with deny-dangerous as a command hook (a python3 process per call)
    http hook      the same, with deny-dangerous as an http hook, answered by the example
                   persistent hook server (conf/hooks/scripts/hook_server.py) on loopback

`fast_echo` is a curated expose entry; every call passes the gate (the hook allows it). The
three are measured interleaved in one run: each round runs a batch of sequential calls on each
gateway in turn, so drift on a shared machine reaches all three alike. The command hook gets
fewer calls per round (it costs a process start each). Reported: p50 and p99 per gateway and
what each hook adds at p50 over no hook; the target is an http hook adding at most 1 ms.

    python bench/hooks_bench.py [--rounds 5] [--calls 400] [--command-calls 40] [--json]
    python bench/hooks_bench.py --quick     # a smoke run: a few calls, the same table
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
from peer import Peer, running
from targets import PYTHON, prepare_home

BENCH = Path(__file__).resolve().parent
FAST_UPSTREAM = BENCH / "fast_upstream.mjs"
UPSTREAM_ID = "fast"
TOOL = f"{UPSTREAM_ID}_echo"
ARGS = {"text": "hello, gate"}
TARGET_ADDED_MS = 1.0
HOOK_ID = "bench/deny-dangerous"
NAMES = ("no hook", "command hook", "http hook")


@dataclass(frozen=True)
class Result:
    name: str
    calls: int
    p50_ms: float
    p99_ms: float


def write_home(home: Path, hook: dict[str, Any] | None) -> None:
    """A seeded home on the fast upstream, with `hook` (a manifest row) as its only enabled hook."""
    prepare_home(home)
    node = shutil.which("node") or "node"
    # A copy inside the home: the isolation guard refuses an upstream script outside it.
    script = home / "mcp" / "servers" / FAST_UPSTREAM.name
    script.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(FAST_UPSTREAM, script)
    expose = {"version": 1,
              "upstreams": [{"id": UPSTREAM_ID, "command": node, "args": [str(script)]}],
              "expose": [{"upstream": UPSTREAM_ID, "tool": "echo", "as": TOOL}]}
    (home / "mcp" / "expose.json").write_text(json.dumps(expose, indent=2) + "\n")
    set_hook(home, hook)


def set_hook(home: Path, hook: dict[str, Any] | None) -> None:
    rows = [] if hook is None else [{"id": HOOK_ID, "event": "PreToolUse", "matcher": "*", "enabled": True,
                                     "timeout": 10, **hook}]
    (home / "hooks" / "hooks.manifest.json").write_text(json.dumps({"version": 1, "hooks": rows}, indent=2))
    (home / "hooks" / "hooks.state.json").unlink(missing_ok=True)


async def timed_calls(peer: Peer, count: int, into: list[float]) -> None:
    params = {"name": TOOL, "arguments": ARGS}
    for _ in range(count):
        started = time.perf_counter()
        await peer.call_tool(params)
        into.append(time.perf_counter() - started)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(root: Path, rounds: int, calls: int, command_calls: int, warmup: int) -> list[Result]:
    homes = [root / "none", root / "command", root / "http"]
    server_script = homes[2] / "hooks" / "scripts" / "hook_server.py"
    write_home(homes[0], None)
    write_home(homes[1], {"type": "command", "command": "python3 ${HOOKS_DIR}/scripts/deny_dangerous.py"})
    write_home(homes[2], {"type": "http", "url": "http://127.0.0.1:1/"})  # the port, once it listens
    server = await trio.lowlevel.open_process([PYTHON, str(server_script), "--port", "0"],
                                              stdout=subprocess.PIPE)
    try:
        assert server.stdout is not None
        line = b""
        with trio.fail_after(30):
            while not line.endswith(b"\n"):
                chunk = await server.stdout.receive_some(256)
                if not chunk:
                    raise RuntimeError("the hook server exited before listening")
                line += chunk
        url = line.decode().split()[-1] + "pre-tool-use"
        set_hook(homes[2], {"type": "http", "url": url})
        samples: list[list[float]] = [[], [], []]
        async with running(gateway_argv(homes[0])) as none, running(gateway_argv(homes[1])) as command, \
                running(gateway_argv(homes[2])) as http:
            peers = (none, command, http)
            for peer in peers:
                with trio.fail_after(60):
                    await peer.initialize()
                    await peer.wait_for_tool(TOOL)
                    await timed_calls(peer, warmup, [])
            for _ in range(rounds):
                for index, peer in enumerate(peers):
                    await timed_calls(peer, command_calls if index == 1 else calls, samples[index])
        return [Result(name, len(values), percentile(values, 0.5) * 1000, percentile(values, 0.99) * 1000)
                for name, values in zip(NAMES, samples, strict=True)]
    finally:
        server.terminate()
        with trio.CancelScope(shield=True):
            await server.wait()
            if server.stdout is not None:
                await server.stdout.aclose()


def gateway_argv(home: Path) -> list[str]:
    return [PYTHON, "-m", "tfunnel", "--home", str(home), "serve"]


def report(results: Sequence[Result], command: str) -> str:
    base = results[0].p50_ms
    lines = ["| gated call to `fast_echo` | calls | p50 | p99 | added at p50 |",
             "|---|---:|---:|---:|---:|"]
    for r in results:
        added = "—" if r is results[0] else f"{(r.p50_ms - base) * 1000:.0f} µs"
        p50, p99 = f"{r.p50_ms * 1000:.0f} µs", f"{r.p99_ms * 1000:.0f} µs"
        lines.append(f"| {r.name} | {r.calls} | {p50} | {p99} | {added} |")
    http_added = results[2].p50_ms - base
    verdict = "met" if http_added <= TARGET_ADDED_MS else "missed"
    lines += ["", f"Target: an http hook adds ≤ {TARGET_ADDED_MS:g} ms at p50: **{verdict}** "
                  f"({http_added * 1000:.0f} µs; the command hook adds "
                  f"{(results[1].p50_ms - base):.1f} ms).", "", f"`{command}`"]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=400, help="calls per round, no hook and http hook")
    parser.add_argument("--command-calls", type=int, default=40, help="calls per round, command hook")
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls per gateway first")
    parser.add_argument("--quick", action="store_true", help="a smoke run (2 rounds of a few calls)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.calls, args.command_calls, args.warmup = 2, 10, 2, 2
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("node") is None:
        print("hooks_bench: node is not on PATH (the fast upstream is a Node.js script)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="tfunnel-hooks-bench-") as tmp:
        results = trio.run(measure, Path(tmp), args.rounds, args.calls, args.command_calls, args.warmup)
    shown = ["python", "bench/hooks_bench.py", *(sys.argv[1:] if argv is None else argv)]
    print(report(results, " ".join(shown)))
    if args.json:
        print(json.dumps([r.__dict__ for r in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
