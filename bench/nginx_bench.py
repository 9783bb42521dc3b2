"""Many instances behind nginx: throughput with 1, 2 and 3 instances, and what nginx adds per call.

    python bench/nginx_bench.py [--rounds 3] [--calls 2000] [--concurrency 32] [--json out.json]
    python bench/nginx_bench.py --quick          # one short round: a few seconds

Three `tfunnel serve --http --instance 900N` processes share one throwaway home (the fast Node
upstream `bench/fast_upstream.mjs` attached, hooks and audit off, `stateKeyFile` set) and three
nginx processes run the shipped `conf/nginx/tfunnel.conf` (its addresses moved to this run's
ports by `tests/nginx.py`), one over the first instance, one over two, one over all three. The
client is the bench's modern (2026-07-28, stateless) HTTP client, `tools/call` of the curated
`fast_echo`: modern requests are the ones nginx spreads. Per round, the targets take turns block
by block: `direct` (the first instance, no proxy), `nginx/1`, `nginx/2`, `nginx/3`:

- latency at concurrency 1 (p50, p99), and `nginx/1`'s p50 minus `direct`'s: the per-call
  latency nginx adds;
- throughput at `--concurrency`, driven by `wrk` (Debian's package: C, one thread, the same
  request from `bench/wrk_modern.lua`, every answer checked to be a complete non-error result)
  for `--seconds`, with the CPU each party used meanwhile (wrk, nginx, the tfunnel instances, the
  upstreams; from /proc, in cores: 2.0 is the whole machine). Without wrk the bench's own Python
  client drives it, which saturates its own core first: its numbers then measure the client.

Medians over rounds, with the range. Every process is stopped and reaped however the run ends.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from http_peer import HttpPeer, running_http
from measure import concurrent_echo, latencies, percentile
from peer import cpu_seconds, descendants
from report import table
from targets import FAST, PYTHON, Target, prepare_home

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.nginx import NAMES, SHIPPED, free_port, nginx, render  # noqa: E402

TARGET = Target("fast", (), tool_prefix="fast_", era="modern")
BLOCK = 200  # latency calls per target per turn
WRK_SCRIPT = Path(__file__).resolve().parent / "wrk_modern.lua"
PARTIES = ("load", "nginx", "tfunnel", "upstreams")


@dataclass
class Measured:
    latency_ns: list[int] = field(default_factory=list)
    throughput: list[float] = field(default_factory=list)  # calls/s, one per block
    cores: list[dict[str, float]] = field(default_factory=list)  # per block: CPU cores by party
    failed: int = 0
    problems: list[str] = field(default_factory=list)  # what failed, as the client or wrk said it


@dataclass
class Parties:
    """The processes whose CPU a throughput block is charged to (the load generator aside)."""

    nginx: list[int]  # the proxy's master (its workers are found below it)
    instances: list[int]  # tfunnel gateways (their upstreams are found below them)

    def cpu(self) -> dict[str, float]:
        used = dict.fromkeys(PARTIES, 0.0)
        for pid in self.nginx:
            used["nginx"] += sum(_cpu(p) for p in [pid, *descendants(pid)])
        for pid in self.instances:
            used["tfunnel"] += _cpu(pid)
            used["upstreams"] += sum(_cpu(p) for p in descendants(pid))
        children = resource.getrusage(resource.RUSAGE_CHILDREN)  # wrk, once reaped
        used["load"] = children.ru_utime + children.ru_stime
        return used


def _cpu(pid: int) -> float:
    try:
        return cpu_seconds(pid)
    except OSError:
        return 0.0


def instance_argv(home: Path, name: str) -> tuple[str, ...]:
    return (PYTHON, "-m", "tfunnel", "--home", str(home), "--log-format", "json", "serve", "--http",
            "--port", "0", "--grace", "1", "--instance", name)


@contextlib.asynccontextmanager
async def proxies(work: Path, ports: dict[str, int], pool: int) -> AsyncIterator[dict[str, HttpPeer]]:
    """One nginx over the first 1, 2 and 3 instances; a modern client on each."""
    async with contextlib.AsyncExitStack() as stack:
        clients: dict[str, HttpPeer] = {}
        for count in (1, 2, 3):
            listen = free_port()
            chosen = {name: ports[name] for name in NAMES[:count]}
            proxy = await stack.enter_async_context(
                nginx(render(SHIPPED.read_text(), chosen, listen), work / f"nginx{count}", listen))
            client = HttpPeer(proxy.proc, pool, "modern")
            client.url = proxy.url
            await stack.enter_async_context(client.open_client())
            await client.initialize()
            clients[f"nginx/{count}"] = client
        yield clients


async def latency_block(peer: HttpPeer, out: Measured, calls: int) -> None:
    before = _tally(peer)
    out.latency_ns += await latencies(peer, TARGET, calls)
    _failures(peer, out, before)


def _tally(peer: HttpPeer) -> tuple[int, int]:
    return peer.failed_calls(), len(peer.failure_examples)


def _failures(peer: HttpPeer, out: Measured, before: tuple[int, int]) -> None:
    """What `peer` counted as failed since `_tally` gave `before` (it keeps the first examples)."""
    out.failed += peer.failed_calls() - before[0]
    out.problems += peer.failure_examples[before[1]:]


async def wrk_block(url: str, out: Measured, seconds: float, concurrency: int, parties: Parties) -> None:
    """`seconds` of wrk at `concurrency` against `url`; its rate, failures and the CPU each party used."""
    wrk = shutil.which("wrk")
    assert wrk is not None
    before, started = parties.cpu(), time.perf_counter()
    done = await trio.run_process([wrk, "-t1", f"-c{concurrency}", f"-d{seconds:g}s", "-s", str(WRK_SCRIPT),
                                   f"{url}/mcp"], capture_stdout=True, capture_stderr=True)
    wall = time.perf_counter() - started
    after = parties.cpu()
    text = done.stdout.decode()
    rate = next(float(line.split()[1]) for line in text.splitlines() if line.startswith("Requests/sec:"))
    failed = next(int(line.split()[1]) for line in text.splitlines() if line.startswith("failed "))
    errors = [line.strip() for line in text.splitlines() if "errors:" in line or "Non-2xx" in line]
    out.failed += failed + (1 if errors and not failed else 0)
    if failed or errors:
        out.problems.append(f"wrk: {failed} answers not a complete result; {'; '.join(errors)}")
    out.throughput.append(rate)
    out.cores.append({party: (after[party] - before[party]) / wall for party in PARTIES})


async def throughput_block(peer: HttpPeer, out: Measured, calls: int, concurrency: int) -> None:
    before = _tally(peer)
    out.throughput.append(calls / await concurrent_echo(peer, TARGET, calls, concurrency))  # type: ignore[arg-type]
    _failures(peer, out, before)


async def run(rounds: int, calls: int, concurrency: int, seconds: float) -> dict[str, list[Measured]]:
    results: dict[str, list[Measured]] = {}
    use_wrk = shutil.which("wrk") is not None
    with tempfile.TemporaryDirectory(prefix="tfunnel-nginx-bench-") as tmp:
        work = Path(tmp)
        home = work / "home"
        prepare_home(home, FAST)
        settings = json.loads((home / "toolfunnel.json").read_text())
        (home / "toolfunnel.json").write_text(json.dumps({**settings, "stateKeyFile": "state.key"}))
        async with contextlib.AsyncExitStack() as stack:
            instances: dict[str, HttpPeer] = {}
            for name in NAMES:  # one at a time: the first creates the shared key file
                peer = await stack.enter_async_context(running_http(instance_argv(home, name), concurrency,
                                                                    era="modern"))
                await peer.initialize()
                await peer.wait_for_tool("fast_echo")
                instances[name] = peer
            ports = {name: int(peer.url.rsplit(":", 1)[1]) for name, peer in instances.items()}
            clients = {"direct": instances[NAMES[0]], **await stack.enter_async_context(
                proxies(work, ports, concurrency))}
            pids = [peer.pid for peer in instances.values()]
            parties = {"direct": Parties([], pids[:1]),
                       **{f"nginx/{k}": Parties([clients[f"nginx/{k}"].pid], pids[:k]) for k in (1, 2, 3)}}
            for peer in clients.values():  # warm-up: every connection of the pool opened
                await throughput_block(peer, Measured(), 4 * concurrency, concurrency)
            for _ in range(rounds):
                measured = {name: Measured() for name in clients}
                for start in range(0, calls, BLOCK):
                    for name, peer in clients.items():
                        await latency_block(peer, measured[name], min(BLOCK, calls - start))
                for _ in range(2):
                    for name, peer in clients.items():
                        if use_wrk:
                            await wrk_block(peer.url, measured[name], seconds, concurrency, parties[name])
                        else:
                            await throughput_block(peer, measured[name], calls, concurrency)
                for name, m in measured.items():
                    results.setdefault(name, []).append(m)
    return results


def summary(results: dict[str, list[Measured]], concurrency: int) -> tuple[str, list[dict[str, Any]]]:
    rows: list[dict[str, Any]] = []
    direct_p50 = [percentile(sorted(m.latency_ns), 50) / 1000 for m in results["direct"]]
    for name, rounds in results.items():
        p50 = [percentile(sorted(m.latency_ns), 50) / 1000 for m in rounds]
        p99 = [percentile(sorted(m.latency_ns), 99) / 1000 for m in rounds]
        rate = [max(m.throughput) for m in rounds]  # the better of each round's two blocks
        added = [a - d for a, d in zip(p50, direct_p50, strict=True)]
        blocks = [c for m in rounds for c in m.cores]
        cores = {party: statistics.median(c[party] for c in blocks) for party in PARTIES} if blocks else {}
        rows.append({"target": name, "p50_us": statistics.median(p50), "p50_range": [min(p50), max(p50)],
                     "p99_us": statistics.median(p99), "added_p50_us": statistics.median(added),
                     "calls_per_s": statistics.median(rate), "rate_range": [min(rate), max(rate)],
                     "cores": cores, "failed": sum(m.failed for m in rounds),
                     "problems": [problem for m in rounds for problem in m.problems][:20]})
    base = next(r["calls_per_s"] for r in rows if r["target"] == "nginx/1")
    lines = table(
        ["target", "p50 µs (range)", "p99 µs", "added p50 µs", f"calls/s @{concurrency} (range)",
         "vs nginx/1", "failed"],
        [[r["target"], f"{r['p50_us']:.0f} ({r['p50_range'][0]:.0f}-{r['p50_range'][1]:.0f})",
          f"{r['p99_us']:.0f}", "-" if r["target"] == "direct" else f"{r['added_p50_us']:.0f}",
          f"{r['calls_per_s']:.0f} ({r['rate_range'][0]:.0f}-{r['rate_range'][1]:.0f})",
          f"{r['calls_per_s'] / base:.2f}x", str(r["failed"])] for r in rows])
    if all(r["cores"] for r in rows):
        lines += "\n\nCPU in cores while wrk drove each target (2.0 = the whole machine):\n\n" + table(
            ["target", *PARTIES, "total", "µs CPU per call (tfunnel)"],
            [[r["target"], *(f"{r['cores'][p]:.2f}" for p in PARTIES),
              f"{sum(r['cores'].values()):.2f}", f"{r['cores']['tfunnel'] / r['calls_per_s'] * 1e6:.0f}"]
             for r in rows])
    return lines, rows


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000, help="calls per target per measurement")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0, help="each wrk throughput block")
    parser.add_argument("--quick", action="store_true", help="one round of 200 calls")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    rounds, calls, seconds = (1, 200, 1.0) if args.quick else (args.rounds, args.calls, args.seconds)
    results = trio.run(run, rounds, calls, args.concurrency, seconds)
    text, rows = summary(results, args.concurrency)
    driver = f"wrk, {seconds:g} s blocks" if shutil.which("wrk") else "the Python client (no wrk)"
    print(f"{rounds} round(s), {calls} latency calls per target, throughput by {driver}; modern "
          "client, fast upstream")
    print(text)
    if args.json is not None:
        args.json.write_text(json.dumps({"rounds": rounds, "calls": calls, "concurrency": args.concurrency,
                                         "rows": rows}, indent=2) + "\n")
    for row in rows:
        for problem in row["problems"]:
            print(f"{row['target']}: {problem}")
    failed = sum(r["failed"] for r in rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
