"""Ablation: the stdio gateway with patches applied, against direct and the relay, side by side.

    python bench/ablate.py [--calls 4000] [--block 100] [--run-tool] PATCH.py [PATCH.py ...]

Each PATCH.py is Python that runs inside a gateway process before `tfunnel.cli.main`: it can
monkeypatch one internal away (what is that part worth?) or add timestamps (`trace_path.py`).
The harness starts `direct`, `relay`, the unpatched gateway and one gateway per patch, all at
once, on the same throwaway home as run.py; then they take turns in blocks of `--block` echo calls
at concurrency 1, like run.py's latency step, and it prints each one's p50, the p50 it adds over
direct, that as a multiple of the relay's, and its CPU per call (user and system, /proc ticks).
Patched gateways are for finding where time goes; a patch that removes a feature is not a result.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from pathlib import Path

import trio
from measure import latencies, percentile
from peer import Peer, running
from targets import DIRECT, PYTHON, Target, compile_bytecode, make_targets, prepare_home

WARMUP = 300
_TICK = os.sysconf("SC_CLK_TCK")


def user_system(pid: int) -> tuple[float, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / _TICK, int(fields[12]) / _TICK


def patched(home: Path, base: Target, patch: Path) -> Target:
    code = (f"{patch.read_text()}\n"
            f"import sys\nfrom tfunnel.cli import main\nsys.exit(main(['--home', {str(home)!r}, 'serve']))\n")
    return Target(f"{base.name} + {patch.stem}", (PYTHON, "-c", code), base.tool_prefix, base.via_run_tool)


async def ablate(targets: list[Target], calls: int, block: int) -> None:
    async with contextlib.AsyncExitStack() as stack:
        peers: list[tuple[Target, Peer]] = []
        for target in targets:
            peer = await stack.enter_async_context(running(target.argv))
            await peer.initialize()
            await peer.wait_for_tool(target.ready_tool)
            await latencies(peer, target, WARMUP)
            peers.append((target, peer))
        samples: dict[str, list[int]] = {t.name: [] for t in targets}
        cpu = {t.name: [0.0, 0.0] for t in targets}
        for _ in range(calls // block):
            for target, peer in peers:
                before = user_system(peer.pid)
                samples[target.name] += await latencies(peer, target, block)
                after = user_system(peer.pid)
                cpu[target.name][0] += after[0] - before[0]
                cpu[target.name][1] += after[1] - before[1]
    p50 = {name: percentile(sorted(values), 50) / 1000 for name, values in samples.items()}
    relay_added = p50["relay"] - p50[DIRECT]
    print(f"{calls} calls per target in blocks of {block}, concurrency 1\n")
    print("| target | p50 (µs) | added over direct (µs) | added / relay's | CPU per call, user + sys (µs) |")
    print("|---|---|---|---|---|")
    for target in targets:
        added = p50[target.name] - p50[DIRECT]
        user, system = (seconds / calls * 1e6 for seconds in cpu[target.name])
        print(f"| {target.name} | {p50[target.name]:.0f} | {added:.0f} | {added / relay_added:.2f} | "
              f"{user + system:.0f} ({user:.0f} + {system:.0f}) |")


def main() -> int:
    p = argparse.ArgumentParser(description="Gateways with patches, side by side with direct and the relay.")
    p.add_argument("patches", nargs="*", type=Path, help="Python files run in the gateway before main()")
    p.add_argument("--calls", type=int, default=4000)
    p.add_argument("--block", type=int, default=100)
    p.add_argument("--run-tool", action="store_true", help="call through toolfunnel_run_tool")
    args = p.parse_args()
    compile_bytecode()
    with tempfile.TemporaryDirectory(prefix="tfunnel-ablate-") as tmp:
        home = Path(tmp) / "home"
        prepare_home(home)
        by_name = {t.name: t for t in make_targets(home)}
        base = by_name["tfunnel/run_tool" if args.run_tool else "tfunnel/curated"]
        targets = [by_name[DIRECT], by_name["relay"], base,
                   *(patched(home, base, patch.resolve()) for patch in args.patches)]
        trio.run(ablate, targets, args.calls, args.block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
