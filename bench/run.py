"""tfunnel-bench: direct upstream vs a bare relay vs tfunnel, side by side in one run.

    python bench/run.py [--upstream fast|python|both] [--rounds 3] [--calls 2000] [--json out.json]
    python bench/run.py --quick          # smoke run, well under 30 s

Two upstreams, each a set of its own: `fast` (bench/fast_upstream.mjs, Node.js, so the gateway is
the bottleneck) and `python` (tfunnel.testing.mock_upstream). Within a round every step is
interleaved across a set's targets (direct, relay, tfunnel/curated, tfunnel/run_tool, direct, ...;
latency and throughput in small blocks), so drift in the machine hits every target alike; see
measure.py. Each metric is reported as the median over rounds with the min-max range; every ratio
is taken within a round, then summarised the same way. With the fast upstream the round also
measures the HTTP face (a bare hypercorn relay vs the gateway's Streamable HTTP with a legacy and
a modern client), and after the rounds the scale table (bench/scale.py) runs. Last comes the
table of issue 18's targets, each met or missed as the numbers say (bench/report.py).
See bench/README.md for what each target and metric means.

Exit status: 0 when the run completed (whether or not the targets were met), 1 on a failure,
130 on Ctrl-C. However it ends, every process it started has been killed and reaped.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import trio
from measure import HttpFace, Leg, Sample, Settings, measure_http_round, measure_round
from peer import descendants, kill_tree
from report import (
    GATEWAYS,
    HTTP_RELAY,
    RELAY,
    Summary,
    goals_table,
    http_goals,
    scale_goals,
    stdio_goals,
    table,
)
from scale import FULL_CONFIGS, QUICK_CONFIGS, ScaleSample, measure_scale, scale_table
from targets import (
    DIRECT,
    FAST,
    UPSTREAMS,
    Target,
    Upstream,
    compile_bytecode,
    make_before_targets,
    make_http_targets,
    make_targets,
    prepare_home,
)

FULL = Settings(calls=2000, warmup=200, concurrency=16, spawns=3, slow_seconds=1.0, slow_parallel=8)
QUICK = Settings(calls=100, warmup=20, concurrency=16, spawns=1, slow_seconds=0.2, slow_parallel=8)
FULL_ROUNDS = 3
SCALE_SPAWNS = 2
SCALE_QUERY_ROUNDS = 10  # each of the scale queries this many times (quick: 2)

Round = dict[str, Sample]


@dataclass(frozen=True)
class Metric:
    label: str
    digits: int
    value: Callable[[Round, str], float]  # (round, target name) -> value


@dataclass(frozen=True)
class Check:
    label: str
    limit: float | None  # None: shown for information, not judged
    at_most: bool  # True: pass when the median <= limit; False: pass when >= limit
    value: Callable[[Round, str], float]  # (round, gateway target name) -> ratio

    def target_text(self) -> str:
        if self.limit is None:
            return "info"
        return f"{'≤' if self.at_most else '≥'} {self.limit:g}"

    def passes(self, median: float) -> bool | None:
        if self.limit is None:
            return None
        return median <= self.limit if self.at_most else median >= self.limit


def _added(field: str) -> Callable[[Round, str], float]:
    """Latency a target adds over the direct upstream in the same round (µs)."""
    def value(r: Round, name: str) -> float:
        return float(getattr(r[name], field) - getattr(r[DIRECT], field))
    return value


def _over_relay(value: Callable[[Round, str], float]) -> Callable[[Round, str], float]:
    def ratio(r: Round, name: str) -> float:
        return value(r, name) / value(r, RELAY)
    return ratio


def _field(field: str, scale: float = 1.0) -> Callable[[Round, str], float]:
    return lambda r, name: float(getattr(r[name], field)) * scale


def _slow_ratio(r: Round, name: str) -> float:
    return r[name].slow_many_s / r[name].slow_one_s


def metrics(settings: Settings) -> list[Metric]:
    n, s = settings.slow_parallel, f"{settings.slow_seconds:g}"
    return [
        Metric("cold start (ms)", 0, _field("cold_start_s", 1000)),
        Metric("latency p50 (µs)", 0, _field("p50_us")),
        Metric("latency p99 (µs)", 0, _field("p99_us")),
        Metric("latency mean (µs)", 0, _field("mean_us")),
        Metric("added p50 over direct (µs)", 0, _added("p50_us")),
        Metric("added p99 over direct (µs)", 0, _added("p99_us")),
        Metric(f"throughput @{settings.concurrency} (calls/s)", 0, _field("throughput")),
        Metric(f"1 x slow {s} s (s)", 3, _field("slow_one_s")),
        Metric(f"{n} x slow {s} s concurrent (s)", 3, _field("slow_many_s")),
        Metric(f"{n}x / 1x slow", 3, _slow_ratio),
        Metric("CPU per call, latency run (µs)", 0, _field("cpu_us_per_call")),
        Metric("RSS after run (MiB)", 1, _field("rss_kib", 1 / 1024)),
        Metric("disk bytes per call", 1, _field("disk_bytes_per_call")),
        Metric("syscalls per call", 1, _field("syscalls_per_call")),
    ]


def checks(settings: Settings) -> list[Check]:
    """Ratios shown per upstream. Issue 18's limits are judged in the target table (fast upstream
    only, bench/report.py); the two judged here are absolute (SPEC §13)."""
    n, s = settings.slow_parallel, f"{settings.slow_seconds:g}"
    return [
        Check("latency p50, tfunnel / relay", None, True, _over_relay(_field("p50_us"))),
        Check("added latency p50, tfunnel / relay", None, True, _over_relay(_added("p50_us"))),
        Check("latency p99, tfunnel / relay", None, True, _over_relay(_field("p99_us"))),
        Check("added latency p99, tfunnel / relay", None, True, _over_relay(_added("p99_us"))),
        Check(f"throughput @{settings.concurrency}, tfunnel / relay", None, False,
              _over_relay(_field("throughput"))),
        Check("cold start, tfunnel / relay", None, True, _over_relay(_field("cold_start_s"))),
        Check("RSS, tfunnel / relay", None, True, _over_relay(_field("rss_kib"))),
        Check("CPU per call, tfunnel / relay", None, True, _over_relay(_field("cpu_us_per_call"))),
        Check(f"{n} x slow {s} s / 1 x (tfunnel alone)", 1.1, True, _slow_ratio),
        Check("disk bytes per forwarded call", 0.0, True, _field("disk_bytes_per_call")),
    ]


@dataclass
class Results:
    """Everything one run measured."""

    stdio: dict[str, list[Round]]  # upstream name -> rounds
    faces: list[HttpFace]
    scale: list[ScaleSample]


async def run_all(sets: dict[str, list[Target]], http: list[Target], settings: Settings, rounds: int,
                  scale_configs: Sequence[tuple[int, int]], scale_spawns: int,
                  scale_queries: int) -> Results:
    results = Results({name: [] for name in sets}, [], [])
    for number in range(1, rounds + 1):
        for upstream, targets in sets.items():
            started = time.perf_counter()
            current = await measure_round(targets, settings)
            progress(f"round {number}/{rounds}, {upstream} upstream ({time.perf_counter() - started:.1f} s)")
            for name, sample in current.items():
                progress(f"  {name:<17} cold {sample.cold_start_s * 1000:4.0f} ms  "
                         f"p50 {sample.p50_us:5.0f} µs  p99 {sample.p99_us:6.0f} µs  "
                         f"{sample.throughput:5.0f} calls/s")
            results.stdio[upstream].append(current)
        if http:
            started = time.perf_counter()
            face = await measure_http_round(http, settings)
            progress(f"round {number}/{rounds}, HTTP face ({time.perf_counter() - started:.1f} s)")
            for name, legs in face.legs.items():
                progress(f"  {name:<12} " + "  ".join(
                    f"@{level}: p50 {leg.p50_us:5.0f} µs p99 {leg.p99_us:6.0f} µs {leg.rate:5.0f} calls/s"
                    for level, leg in legs.items()))
            for name, health in face.health.items():
                if health.failed_calls or health.stalls or health.log_problems:
                    progress(f"  {name} problems: {health.failed_calls} failed call(s) {health.failures}, "
                             f"{health.stalls} call(s) over 1 s, {len(health.log_problems)} warning(s)")
            results.faces.append(face)
    if scale_configs:
        progress("scale")
        results.scale = await measure_scale(scale_configs, scale_spawns, scale_queries, progress)
    return results


def gateways(names: Sequence[str]) -> list[str]:
    """The gateway targets of a run: tfunnel's, and an earlier tree's when `--before` is given."""
    return [n for n in names if n in GATEWAYS or n.startswith("before/")]


def upstream_text(upstream: Upstream) -> str:
    """The upstream's command line, with paths relative to the repository."""
    root = str(Path(__file__).resolve().parent.parent) + "/"
    python = "python" if upstream.argv[0] == sys.executable else upstream.argv[0]
    return " ".join([python, *(arg.removeprefix(root) for arg in upstream.argv[1:])])


def stdio_report(upstream: Upstream, results: list[Round], settings: Settings) -> str:
    names = list(results[0])
    metric_rows = [[m.label, *(Summary.of([m.value(r, name) for r in results]).show(m.digits)
                               for name in names)] for m in metrics(settings)]
    check_rows = []
    for c in checks(settings):
        cells = [c.label, c.target_text()]
        for name in gateways(names):
            summary = Summary.of([c.value(r, name) for r in results])
            verdict = {None: "", True: " pass", False: " MISS"}[c.passes(summary.median)]
            cells.append(f"{summary.show(2)}{verdict}")
        check_rows.append(cells)
    return "\n".join([
        f"## {upstream.name} upstream: {upstream_text(upstream)}",
        "",
        "Median [min-max] over rounds:",
        "",
        table(["metric", *names], metric_rows),
        "",
        "Ratios within each round, median [min-max]:",
        "",
        table(["check", "target", *gateways(names)], check_rows),
    ])


def report(results: Results, settings: Settings, rounds: int) -> tuple[str, list[dict[str, Any]]]:
    parts = [
        f"tfunnel-bench: {rounds} round(s), {settings.calls} calls (+{settings.warmup} warm-up), "
        f"concurrency {settings.concurrency} (HTTP {settings.http_concurrency}), {settings.spawns} cold "
        f"start(s) per round, slow {settings.slow_seconds:g} s x {settings.slow_parallel}",
        machine_line(),
    ]
    for name, rounds_of in results.stdio.items():
        parts += ["", stdio_report(UPSTREAMS[name], rounds_of, settings)]
    if results.faces:
        parts += ["", http_report(results.faces)]
    if results.scale:
        parts += ["", scale_table(results.scale)]
    goals = [*(stdio_goals(results.stdio[FAST.name]) if FAST.name in results.stdio else []),
             *http_goals(results.faces), *scale_goals(results.scale)]
    if goals:
        parts += ["", goals_table(goals)]
    return "\n".join(parts), [g.to_json() for g in goals]


@dataclass(frozen=True)
class HttpRow:
    label: str
    level: str  # "1" or the HTTP-face concurrency, a key of HttpFace.legs[...]
    field: str  # a Leg field
    digits: int


def http_rows(concurrency: int) -> list[HttpRow]:
    n = str(concurrency)
    return [
        HttpRow("calls/s @1", "1", "rate", 0),
        HttpRow("latency p50 @1 (µs)", "1", "p50_us", 0),
        HttpRow("latency p99 @1 (µs)", "1", "p99_us", 0),
        HttpRow(f"calls/s @{n}", n, "rate", 0),
        HttpRow(f"latency p50 @{n} (µs)", n, "p50_us", 0),
        HttpRow(f"latency p99 @{n} (µs)", n, "p99_us", 0),
        HttpRow("server CPU per call @1 (µs)", "1", "server_cpu_us_per_call", 0),
        HttpRow(f"server CPU per call @{n} (µs)", n, "server_cpu_us_per_call", 0),
        HttpRow("client CPU per call @1 (µs)", "1", "client_cpu_us_per_call", 0),
        HttpRow(f"client CPU per call @{n} (µs)", n, "client_cpu_us_per_call", 0),
    ]


def http_report(faces: list[HttpFace]) -> str:
    """The HTTP-face table (median [min-max] over rounds; the ratios to the relay taken within
    each round) and every problem the HTTP client or a server's log showed."""
    names = list(faces[0].legs)  # http/relay, http/legacy, http/modern
    gateways_ = [name for name in names if name != HTTP_RELAY]
    concurrency = faces[0].concurrency

    def value(face: HttpFace, name: str, row: HttpRow) -> float:
        leg: Leg = face.legs[name][row.level]
        return float(getattr(leg, row.field))

    rows = []
    for row in http_rows(concurrency):
        cells = [row.label, *(Summary.of([value(f, name, row) for f in faces]).show(row.digits)
                              for name in names)]
        cells += [Summary.of([value(f, name, row) / value(f, HTTP_RELAY, row) for f in faces]).show(2)
                  for name in gateways_]
        rows.append(cells)
    for label, field in (("RSS server (MiB)", "rss_kib"), ("RSS server + upstream (MiB)", "rss_total_kib")):
        cells = [label, *(Summary.of([getattr(f, field)[name] / 1024 for f in faces]).show(1)
                          for name in names)]
        cells += [Summary.of([getattr(f, field)[name] / getattr(f, field)[HTTP_RELAY] for f in faces]).show(2)
                  for name in gateways_]
        rows.append(cells)
    lines = [
        f"## HTTP face, fast upstream: POST /mcp, keep-alive pool of {concurrency}; http/relay is "
        f"bench/http_relay.py (bare hypercorn), http/legacy and http/modern are tfunnel serve --http "
        f"with a legacy (session) and a modern (2026-07-28, stateless) client; median [min-max] over "
        f"rounds, ratios within each round:",
        "",
        table(["metric", *names, *(f"{name} / relay" for name in gateways_)], rows),
        "",
    ]
    for name in names:
        statuses: Counter[str] = Counter()
        failures: Counter[str] = Counter()
        levels: Counter[str] = Counter()
        health = [f.health[name] for f in faces]
        for h in health:
            statuses.update(h.statuses)
            failures.update(h.failures)
            levels.update(h.log_levels)
        lines.append(
            f"{name}, all rounds: tools/call HTTP statuses {dict(sorted(statuses.items()))}; "
            f"connections per round {sorted({h.connections for h in health})}; "
            f"failed calls {sum(failures.values())}{' ' + str(dict(failures)) if failures else ''}; "
            f"calls over 1 s {sum(h.stalls for h in health)}, "
            f"slowest {max(h.slowest_ms for h in health):.1f} ms; "
            f"log lines by level {dict(sorted(levels.items()))}")
        lines += [f"  failed call: {e}" for e in [e for h in health for e in h.failure_examples][:5]]
        lines += [f"  log: {p}" for p in [p for h in health for p in h.log_problems][:5]]
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    model = ""
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    try:
        done = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=10)
        node = done.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        node = "not found"
    return {"nproc": os.cpu_count(), "cpu": model, "python": platform.python_version(),
            "trio": trio.__version__, "kernel": platform.release(), "node": node}


def machine_line() -> str:
    m = machine()
    return (f"machine: {m['nproc']} CPUs ({m['cpu'] or 'unknown model'}), Linux {m['kernel']}, "
            f"Python {m['python']}, trio {m['trio']}, node {m['node']}")


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def reap_strays() -> None:
    """Belt and braces: kill anything still below us (each peer is already stopped on exit)."""
    strays = descendants(os.getpid())
    if strays:
        progress(f"killing {len(strays)} leftover process(es): {strays}")
        for pid in strays:
            kill_tree(pid, [])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 1 round, 100 calls, slow 0.2 s, the quick scale table")
    p.add_argument("--upstream", choices=("fast", "python", "both"), default="both",
                   help="the upstream(s) at the end of the line (default both)")
    p.add_argument("--rounds", type=int, help=f"interleaved rounds (default {FULL_ROUNDS}; --quick: 1)")
    p.add_argument("--calls", type=int, help="calls per latency and per throughput run (default 2000)")
    p.add_argument("--spawns", type=int, help="cold starts per target per round (default 3)")
    p.add_argument("--slow-seconds", type=float, help="seconds of the slow tool (default 1)")
    p.add_argument("--no-http", action="store_true", help="leave out the HTTP face")
    p.add_argument("--no-scale", action="store_true", help="leave out the scale table")
    p.add_argument("--before", type=Path, metavar="TREE",
                   help="also measure tfunnel from another checkout (e.g. a worktree of an earlier "
                        "commit) in the same rounds: targets before/curated and before/run_tool")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write every number to PATH")
    args = p.parse_args(argv)
    for option in ("rounds", "calls", "spawns", "slow_seconds"):
        value = getattr(args, option)
        if value is not None and value <= 0:
            p.error(f"--{option.replace('_', '-')} must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    base = QUICK if args.quick else FULL
    rounds = args.rounds or (1 if args.quick else FULL_ROUNDS)
    settings = Settings(
        calls=args.calls or base.calls,
        warmup=base.warmup,
        concurrency=base.concurrency,
        spawns=args.spawns or base.spawns,
        slow_seconds=args.slow_seconds or base.slow_seconds,
        slow_parallel=base.slow_parallel,
        http_concurrency=base.http_concurrency,
    )
    upstreams = [FAST, UPSTREAMS["python"]] if args.upstream == "both" else [UPSTREAMS[args.upstream]]
    scale_configs = QUICK_CONFIGS if args.quick else FULL_CONFIGS
    if args.no_scale or FAST not in upstreams:
        scale_configs = ()
    compile_bytecode()
    if args.before is not None:
        compile_bytecode(args.before.resolve() / "tfunnel")
    with tempfile.TemporaryDirectory(prefix="tfunnel-bench-") as tmp:
        sets: dict[str, list[Target]] = {}
        http: list[Target] = []
        for upstream in upstreams:
            home = Path(tmp) / f"home-{upstream.name}"
            prepare_home(home, upstream)
            sets[upstream.name] = make_targets(home, upstream)
            if args.before is not None:
                before_home = Path(tmp) / f"before-home-{upstream.name}"
                prepare_home(before_home, upstream, args.before)
                sets[upstream.name] += make_before_targets(before_home, args.before.resolve(), upstream)
            if upstream is FAST and not args.no_http:
                http = make_http_targets(home, upstream)
        interrupted = False
        try:
            results = trio.run(run_all, sets, http, settings, rounds, scale_configs,
                               1 if args.quick else SCALE_SPAWNS, 2 if args.quick else SCALE_QUERY_ROUNDS)
        except* KeyboardInterrupt:
            interrupted = True  # every peer was already stopped on the way out
        finally:
            reap_strays()
    if interrupted:
        progress("interrupted")
        return 130
    text, verdicts = report(results, settings, rounds)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({
            "machine": machine(), "settings": asdict(settings), "rounds": rounds,
            "upstreams": {u.name: list(u.argv) for u in upstreams},
            "results": {name: [{target: asdict(sample) for target, sample in r.items()} for r in rs]
                        for name, rs in results.stdio.items()},
            "http": [asdict(face) for face in results.faces],
            "scale": [asdict(sample) for sample in results.scale],
            "targets": verdicts,
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
