"""Profile where a gateway (tfunnel, or the bare relay for comparison) spends its time.

    python bench/profile_gateway.py [--target tfunnel/curated] [--profiler cprofile|pyinstrument]
                                    [--calls 3000] [--concurrency 1] [--startup] [--out PATH] [--top N]

Runs the target's gateway under the profiler (`python -m cProfile -o OUT ...` or
`python -m pyinstrument -r text -o OUT ...`) on the same throwaway home as bench/run.py, drives
it with the same minimal client (initialize, wait for the upstream, warm-up, then the calls),
closes stdin so the gateway exits cleanly and writes the profile, and prints it. For cProfile:
own time per area (each tfunnel module, the trio runtime, json, jsonschema, pipe syscalls, idle
wait), then the top N functions by own and by cumulative time. For pyinstrument (`pip install
pyinstrument`; not a project dependency): its flat list by own time.

cProfile inflates code that makes many small Python calls (trio's scheduler most of all), so
read the areas as shares of where time goes, not as microseconds of real latency.
With `--startup` it profiles start-up only: spawn until the upstream tool is listed.
"""

from __future__ import annotations

import argparse
import pstats
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import trio
from measure import ECHO_TEXT, concurrent_echo, latencies
from peer import running
from targets import PYTHON, Target, compile_bytecode, make_targets, prepare_home

# Writing the profile happens after the gateway's own shutdown; give it time before SIGKILL.
PROFILE_GRACE_S = 30.0
WARMUP = 200
GATEWAYS = ("relay", "tfunnel/curated", "tfunnel/run_tool")
SMALL_AREA = 0.005  # areas under this share of all own time are summed into one line


async def drive(target: Target, argv: list[str], calls: int, concurrency: int, startup: bool) -> float:
    """Run the workload; return its wall time in seconds."""
    started = time.perf_counter()
    async with running(argv, grace_s=PROFILE_GRACE_S) as peer:
        await peer.initialize()
        await peer.wait_for_tool(target.ready_tool)
        if startup:
            return time.perf_counter() - started
        await peer.call_tool(target.call_params("echo", {"text": ECHO_TEXT}))
        await latencies(peer, target, WARMUP)
        started = time.perf_counter()
        if concurrency == 1:
            await latencies(peer, target, calls)
        else:
            await concurrent_echo(peer, target, calls, concurrency)
        return time.perf_counter() - started


def area(filename: str, function: str) -> str:
    """Which part of the gateway a profiled function belongs to, for a coarse cost breakdown."""
    if "epoll" in function and "poll" in function:
        return "idle (epoll wait)"
    if function in ("<built-in method posix.write>", "<built-in method posix.read>"):
        return f"pipe syscall ({function.split('.')[-1][:-1]})"
    if "importlib" in filename or function in _IMPORT_BUILTINS:
        return "imports"
    if "_contextvars.Context" in function:
        return "trio runtime"
    for marker, name in _LIBRARIES:
        if marker in filename:
            return name
    if "/tfunnel/" in filename:
        return "tfunnel: " + "/".join(Path(filename).parts[-2:])
    if filename.endswith("relay.py"):
        return "relay.py"
    return "other (stdlib, builtins)"


_IMPORT_BUILTINS = frozenset({"<built-in method marshal.loads>", "<built-in method _imp.create_dynamic>",
                              "<built-in method _imp.exec_dynamic>", "<built-in method builtins.exec>",
                              "<built-in method _io.open_code>", "<built-in method posix.stat>"})
# (path marker, area): the libraries a forwarded call runs through.
# trio steps each task in Context.run, and trio and outcome build their records with attrs.
_LIBRARIES = (("/trio/", "trio runtime"), ("/outcome/", "trio runtime"), ("<attrs generated", "trio runtime"),
              ("/jsonschema", "jsonschema"), ("/referencing/", "jsonschema"), ("/json/", "json"),
              ("/structlog/", "structlog"))


def by_area(stats: pstats.Stats) -> Counter[str]:
    totals: Counter[str] = Counter()
    # pstats keeps {(file, line, function): (primitive calls, calls, own time, cumulative, callers)}.
    for (filename, _line, function), row in stats.stats.items():  # type: ignore[attr-defined]
        totals[area(filename, function)] += row[2]
    return totals


def main() -> int:
    p = argparse.ArgumentParser(description="Profile a gateway forwarding echo calls.")
    p.add_argument("--target", choices=GATEWAYS, default="tfunnel/curated")
    p.add_argument("--profiler", choices=("cprofile", "pyinstrument"), default="cprofile")
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--startup", action="store_true", help="profile spawn -> upstream tool listed")
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "tfunnel-gateway.prof",
                   help="where the profile goes (default: the temp dir)")
    p.add_argument("--top", type=int, default=30, help="functions to list (0: only the areas)")
    args = p.parse_args()
    compile_bytecode()
    with tempfile.TemporaryDirectory(prefix="tfunnel-profile-") as tmp:
        home = Path(tmp) / "home"
        prepare_home(home)
        target = next(t for t in make_targets(home) if t.name == args.target)
        out = str(args.out.resolve())
        profiler = (["-m", "cProfile", "-o", out] if args.profiler == "cprofile"
                    else ["-m", "pyinstrument", "--show-all", "-r", "text", "-p", "flat=true", "-o", out])
        argv = [PYTHON, *profiler, *target.argv[1:]]
        wall = trio.run(drive, target, argv, args.calls, args.concurrency, args.startup)
    if args.startup:
        print(f"start-up to upstream tool listed: {wall * 1000:.0f} ms (under {args.profiler})\n")
    else:
        print(f"{args.calls} calls at concurrency {args.concurrency}: {wall:.2f} s, "
              f"{wall / args.calls * 1e6:.0f} µs per call (under {args.profiler})\n")
    if args.profiler == "pyinstrument":
        print(args.out.read_text())
        return 0
    stats = pstats.Stats(str(args.out), stream=sys.stdout)
    calls = 1 if args.startup else args.calls + WARMUP + 1
    print(f"Own time by area (per call: over {calls} calls, start-up included):")
    areas = by_area(stats)
    floor = sum(areas.values()) * SMALL_AREA
    small = [seconds for seconds in areas.values() if seconds < floor]
    for name, seconds in areas.most_common(len(areas) - len(small)):
        print(f"  {seconds:8.3f} s  {seconds / calls * 1e6:9.1f} µs/call  {name}")
    print(f"  {sum(small):8.3f} s  {sum(small) / calls * 1e6:9.1f} µs/call  ({len(small)} smaller areas)\n")
    if args.top > 0:
        stats.strip_dirs().sort_stats("tottime").print_stats(args.top)
        stats.sort_stats("cumulative").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
