"""tfunnel-bench: direct upstream vs a bare relay vs tfunnel, side by side in one run.

    python bench/run.py [--rounds 5] [--calls 2000] [--json out.json]
    python bench/run.py --quick          # smoke run, well under 20 s

Within a round every step is interleaved across the targets (direct, relay, tfunnel/curated,
tfunnel/run_tool, direct, ...; latency and throughput in small blocks), so drift in the machine
hits every target alike; see measure.py. Each metric is reported as the median over rounds with
the min-max range; every ratio is taken within a round, then summarised the same way. A second
table compares the HTTP face (`tfunnel serve --http`, POST /mcp) with the direct stdio upstream at
concurrency 1 and 32. See bench/README.md for what each target and metric means.

Exit status: 0 when the run completed (whether or not the targets were met), 1 on a failure,
130 on Ctrl-C. However it ends, every process it started has been killed and reaped.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import trio
from measure import HttpFace, Leg, Sample, Settings, measure_round
from peer import descendants, kill_tree
from targets import (
    DIRECT,
    HTTP,
    Target,
    compile_bytecode,
    make_before_targets,
    make_http_target,
    make_targets,
    prepare_home,
)

RELAY = "relay"
GATEWAYS = ("tfunnel/curated", "tfunnel/run_tool")

FULL = Settings(calls=2000, warmup=200, concurrency=16, spawns=3, slow_seconds=2.0, slow_parallel=8)
QUICK = Settings(calls=100, warmup=20, concurrency=16, spawns=1, slow_seconds=0.5, slow_parallel=8)

Round = dict[str, Sample]


@dataclass(frozen=True)
class Summary:
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        return cls(statistics.median(values), min(values), max(values))

    def show(self, digits: int) -> str:
        return f"{self.median:.{digits}f} [{self.low:.{digits}f}-{self.high:.{digits}f}]"


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
    n, s = settings.slow_parallel, f"{settings.slow_seconds:g}"
    return [
        Check("added latency p50, tfunnel / relay", 1.5, True, _over_relay(_added("p50_us"))),
        Check("latency p99, tfunnel / relay", 2.0, True, _over_relay(_field("p99_us"))),
        Check("added latency p99, tfunnel / relay", None, True, _over_relay(_added("p99_us"))),
        Check(f"throughput @{settings.concurrency}, tfunnel / relay", 0.5, False,
              _over_relay(_field("throughput"))),
        Check("cold start, tfunnel / relay", 1.5, True, _over_relay(_field("cold_start_s"))),
        Check("RSS, tfunnel / relay", 1.5, True, _over_relay(_field("rss_kib"))),
        Check(f"{n} x slow {s} s / 1 x (tfunnel alone)", 1.1, True, _slow_ratio),
        Check("disk bytes per forwarded call", 0.0, True, _field("disk_bytes_per_call")),
        Check("CPU per call, tfunnel / relay", None, True, _over_relay(_field("cpu_us_per_call"))),
    ]


async def run_rounds(targets: Sequence[Target], http: Target | None, settings: Settings,
                     rounds: int) -> tuple[list[Round], list[HttpFace]]:
    results: list[Round] = []
    faces: list[HttpFace] = []
    for number in range(1, rounds + 1):
        started = time.perf_counter()
        current, face = await measure_round(targets, settings, http)
        progress(f"round {number}/{rounds} ({time.perf_counter() - started:.1f} s)")
        for name, sample in current.items():
            progress(f"  {name:<17} cold {sample.cold_start_s * 1000:4.0f} ms  p50 {sample.p50_us:5.0f} µs  "
                     f"p99 {sample.p99_us:6.0f} µs  {sample.throughput:5.0f} calls/s")
        results.append(current)
        if face is not None:
            for name, legs in face.legs.items():
                progress(f"  HTTP face {name:<12} " + "  ".join(
                    f"@{level}: p50 {leg.p50_us:5.0f} µs p99 {leg.p99_us:6.0f} µs {leg.rate:5.0f} calls/s"
                    for level, leg in legs.items()))
            if face.failed_calls or face.stalls or face.log_problems:
                progress(f"  HTTP face problems: {face.failed_calls} failed call(s) {face.failures}, "
                         f"{face.stalls} call(s) over 1 s, {len(face.log_problems)} gateway warning(s)")
            faces.append(face)
    return results, faces


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """An aligned Markdown pipe table (readable in a terminal too)."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def gateways(names: Sequence[str]) -> list[str]:
    """The gateway targets of a run: tfunnel's, and an earlier tree's when `--before` is given."""
    return [n for n in names if n in GATEWAYS or n.startswith("before/")]


def report(results: list[Round], faces: list[HttpFace], settings: Settings,
           rounds: int) -> tuple[str, list[dict[str, Any]]]:
    names = list(results[0])
    metric_rows = [[m.label, *(Summary.of([m.value(r, name) for r in results]).show(m.digits)
                               for name in names)] for m in metrics(settings)]
    verdicts: list[dict[str, Any]] = []
    check_rows = []
    for c in checks(settings):
        cells = [c.label, c.target_text()]
        for name in gateways(names):
            summary = Summary.of([c.value(r, name) for r in results])
            ok = c.passes(summary.median)
            verdict = {None: "", True: " pass", False: " MISS"}[ok]
            cells.append(f"{summary.show(2)}{verdict}")
            verdicts.append({"check": c.label, "gateway": name, "limit": c.limit,
                             "at_most": c.at_most, **asdict(summary), "pass": ok})
        check_rows.append(cells)
    text = "\n".join([
        f"tfunnel-bench: {rounds} round(s), {settings.calls} calls (+{settings.warmup} warm-up), "
        f"concurrency {settings.concurrency}, {settings.spawns} cold start(s) per round, "
        f"slow {settings.slow_seconds:g} s x {settings.slow_parallel}",
        machine_line(),
        "",
        "Median [min-max] over rounds:",
        "",
        table(["metric", *names], metric_rows),
        "",
        "Ratios within each round, median [min-max]; pass/MISS judged on the median:",
        "",
        table(["check", "target", *gateways(names)], check_rows),
        *(["", http_report(faces)] if faces else []),
    ])
    return text, verdicts


@dataclass(frozen=True)
class HttpRow:
    label: str
    level: str  # "1" or the HTTP-face concurrency, a key of HttpFace.legs[...]
    field: str  # a Leg field
    digits: int
    ratio: bool = True  # show tfunnel/http / direct


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
    """The HTTP-face table (median [min-max] over rounds; the ratio taken within each round) and
    every problem the HTTP client or the gateway's log showed."""
    names = list(faces[0].legs)  # direct, tfunnel/http
    concurrency = faces[0].concurrency

    def value(face: HttpFace, name: str, row: HttpRow) -> float:
        leg: Leg = face.legs[name][row.level]
        return float(getattr(leg, row.field))

    rows = []
    for row in http_rows(concurrency):
        cells = [row.label, *(Summary.of([value(f, name, row) for f in faces]).show(row.digits)
                              for name in names)]
        cells.append(Summary.of([value(f, HTTP, row) / value(f, DIRECT, row) for f in faces]).show(2)
                     if row.ratio else "")
        rows.append(cells)
    rows.append(["RSS after run (MiB)",
                 *(Summary.of([f.rss_kib[name] / 1024 for f in faces]).show(1) for name in names), ""])
    statuses: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    levels: Counter[str] = Counter()
    for f in faces:
        statuses.update(f.statuses)
        failures.update(f.failures)
        levels.update(f.log_levels)
    lines = [
        f"HTTP face: tfunnel serve --http (POST /mcp, keep-alive pool of {concurrency}) vs the direct "
        f"stdio upstream; median [min-max] over rounds, ratio within each round:",
        "",
        table(["metric", "direct (stdio)", HTTP, f"{HTTP} / direct"], rows),
        "",
        f"{HTTP}, all rounds: tools/call HTTP statuses {dict(sorted(statuses.items()))}; "
        f"connections per round {sorted({f.connections for f in faces})}; "
        f"failed calls {sum(failures.values())}{' ' + str(dict(failures)) if failures else ''}; "
        f"calls over 1 s {sum(f.stalls for f in faces)}, slowest {max(f.slowest_ms for f in faces):.1f} ms; "
        f"gateway log lines by level {dict(sorted(levels.items()))}",
    ]
    examples = [e for f in faces for e in f.failure_examples][:10]
    problems = [p for f in faces for p in f.log_problems][:10]
    lines += [f"  failed call: {e}" for e in examples]
    lines += [f"  gateway log: {p}" for p in problems]
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    model = ""
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"nproc": os.cpu_count(), "cpu": model, "python": platform.python_version(),
            "trio": trio.__version__, "kernel": platform.release()}


def machine_line() -> str:
    m = machine()
    return (f"machine: {m['nproc']} CPUs ({m['cpu'] or 'unknown model'}), Linux {m['kernel']}, "
            f"Python {m['python']}, trio {m['trio']}")


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
    p.add_argument("--quick", action="store_true", help="smoke run: 1 round, 100 calls, slow 0.5 s")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 5; --quick: 1)")
    p.add_argument("--calls", type=int, help="calls per latency and per throughput run (default 2000)")
    p.add_argument("--spawns", type=int, help="cold starts per target per round (default 3)")
    p.add_argument("--slow-seconds", type=float, help="seconds of the slow tool (default 2)")
    p.add_argument("--no-http", action="store_true", help="leave out the HTTP-face comparison")
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
    rounds = args.rounds or (1 if args.quick else 5)
    settings = Settings(
        calls=args.calls or base.calls,
        warmup=base.warmup,
        concurrency=base.concurrency,
        spawns=args.spawns or base.spawns,
        slow_seconds=args.slow_seconds or base.slow_seconds,
        slow_parallel=base.slow_parallel,
        http_concurrency=base.http_concurrency,
    )
    compile_bytecode()
    with tempfile.TemporaryDirectory(prefix="tfunnel-bench-") as tmp:
        home = Path(tmp) / "home"
        prepare_home(home)
        targets = make_targets(home)
        if args.before is not None:
            tree = args.before.resolve()
            compile_bytecode(tree / "tfunnel")
            before_home = Path(tmp) / "before-home"
            prepare_home(before_home)
            targets += make_before_targets(before_home, tree)
        http = None if args.no_http else make_http_target(home)
        interrupted = False
        try:
            results, faces = trio.run(run_rounds, targets, http, settings, rounds)
        except* KeyboardInterrupt:
            interrupted = True  # every peer was already stopped on the way out
        finally:
            reap_strays()
    if interrupted:
        progress("interrupted")
        return 130
    text, verdicts = report(results, faces, settings, rounds)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({
            "machine": machine(), "settings": asdict(settings), "rounds": rounds,
            "results": [{name: asdict(sample) for name, sample in r.items()} for r in results],
            "checks": verdicts,
            "http": [asdict(face) for face in faces],
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
