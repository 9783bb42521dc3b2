"""One round of measurements across all targets, interleaved so noise hits every target alike.

A round, with each step taken target after target (direct, relay, tfunnel/curated, ...):

1. cold starts: `spawns` fresh processes per target, alternating between targets;
2. one long-lived process per target, all started together: check, warm-up;
3. latency at concurrency 1 in blocks of `LATENCY_BLOCK` calls, alternating targets block by block,
   with /proc io and CPU counters read around each block;
4. throughput at concurrency N, in blocks of `THROUGHPUT_BLOCK` calls, alternating the same way;
5. one slow call, then K concurrent slow calls; then each process's RSS.

The HTTP face (`measure_http_round`) is a round of its own: one long-lived process per HTTP
target (the bare hypercorn relay, the gateway with a legacy client, the gateway with a modern
client), each checked and warmed up, then latency at concurrency 1 in blocks of `LATENCY_BLOCK`
and latency at `http_concurrency` in blocks of `HTTP_BLOCK` (after 2 x `http_concurrency` warm-up
calls that open the whole connection pool), the targets taking turns block by block, every call
timed; then each server's RSS (alone, and with its children).

The machine this runs on is shared and small, so a noisy second hurts one block of every
target rather than the whole latency run of one of them.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio
from http_peer import HttpPeer, running_http
from peer import Peer, PeerError, cpu_seconds, descendants, io_counters, rss_kib, running
from targets import Target

ECHO_TEXT = "hello from tfunnel-bench"
COLD_START_TIMEOUT_S = 30.0
# Generous: on a 2-core box three busy processes share the CPU; a hang still fails fast-ish.
PHASE_TIMEOUT_S = 300.0
LATENCY_BLOCK = 100  # calls per target before switching to the next (about 50-100 ms)
THROUGHPUT_BLOCK = 500  # calls per target per throughput block
HTTP_BLOCK = 500  # calls per target per block of the HTTP-face concurrency step


class Caller(Protocol):
    async def call_tool(self, params: Mapping[str, Any]) -> Any: ...


@dataclass(frozen=True)
class Settings:
    calls: int  # latency calls and throughput calls per target per round
    warmup: int
    concurrency: int
    spawns: int  # cold starts per target per round
    slow_seconds: float
    slow_parallel: int
    http_concurrency: int = 32  # the HTTP face's second concurrency level (the first is 1)


@dataclass(frozen=True)
class Sample:
    """What one target measured in one round (times in seconds unless named otherwise)."""

    cold_start_s: float  # median over `spawns` fresh processes
    p50_us: float
    p99_us: float
    mean_us: float
    throughput: float  # calls/s at `concurrency`
    slow_one_s: float
    slow_many_s: float
    cpu_us_per_call: float  # user + system CPU of that process over the latency run, per call
    rss_kib: int  # of the process the client talks to (for direct: the mock itself)
    disk_bytes_per_call: float  # read_bytes + write_bytes over the latency run, per call
    syscalls_per_call: float  # syscr + syscw over the latency run, per call


@dataclass(frozen=True)
class Leg:
    """One target at one concurrency in the HTTP-face comparison, over one round."""

    calls: int
    rate: float  # calls/s: calls over the summed wall time of the blocks
    p50_us: float
    p99_us: float
    server_cpu_us_per_call: float  # the HTTP gateway, or for direct the mock itself
    client_cpu_us_per_call: float  # this harness process (the HTTP or the stdio client)


@dataclass(frozen=True)
class HttpHealth:
    """What went wrong, if anything, on one HTTP target over one round."""

    failed_calls: int  # tools/call over HTTP that did not answer 200 with a result
    failures: dict[str, int]  # by kind ("status 503", "timeout", "JSON-RPC error", ...)
    failure_examples: list[str]
    statuses: dict[str, int]  # HTTP status of every tools/call POST (warm-up included)
    connections: int  # TCP connections those calls went over (keep-alive: the pool size)
    stalls: int  # calls slower than http_peer.STALL_S
    slowest_ms: float
    log_levels: dict[str, int]  # the server's stderr JSON log lines by level
    log_problems: list[str]  # its first warning/error lines


@dataclass(frozen=True)
class HttpFace:
    """The HTTP face over one round: the relay and the gateway's two eras."""

    concurrency: int
    legs: dict[str, dict[str, Leg]]  # target name -> "1" / str(concurrency) -> Leg
    rss_kib: dict[str, int]  # after the round, the server process alone
    rss_total_kib: dict[str, int]  # the server with its children (the upstream)
    health: dict[str, HttpHealth]


@dataclass
class _LegTally:
    latencies_ns: list[int] = field(default_factory=list)
    seconds: float = 0.0
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0

    @contextlib.contextmanager
    def block(self, server_pid: int) -> Iterator[None]:
        """Add one block's wall time and CPU (server process and this one) to the tally."""
        server, client, started = cpu_seconds(server_pid), time.process_time(), time.perf_counter()
        yield
        self.seconds += time.perf_counter() - started
        self.client_cpu_s += time.process_time() - client
        self.server_cpu_s += cpu_seconds(server_pid) - server

    def leg(self) -> Leg:
        ordered = sorted(self.latencies_ns)
        calls = len(ordered)
        return Leg(calls=calls, rate=calls / self.seconds, p50_us=percentile(ordered, 50) / 1000,
                   p99_us=percentile(ordered, 99) / 1000,
                   server_cpu_us_per_call=self.server_cpu_s / calls * 1e6,
                   client_cpu_us_per_call=self.client_cpu_s / calls * 1e6)


@dataclass
class _Tally:
    """One target's running totals within a round."""

    cold: list[float] = field(default_factory=list)
    latencies_ns: list[int] = field(default_factory=list)
    cpu_s: float = 0.0
    io: Counter[str] = field(default_factory=Counter)
    throughput_calls: int = 0
    throughput_s: float = 0.0


async def measure_round(targets: Sequence[Target], settings: Settings) -> dict[str, Sample]:
    """One round over the stdio `targets` (one upstream's set)."""
    tallies = {t.name: _Tally() for t in targets}
    for _ in range(settings.spawns):
        for t in targets:
            tallies[t.name].cold.append(await cold_start(t))
    async with contextlib.AsyncExitStack() as stack:
        peers = [await stack.enter_async_context(running(t.argv)) for t in targets]
        pairs = list(zip(targets, peers, strict=True))
        with trio.fail_after(PHASE_TIMEOUT_S):
            for t, peer in pairs:
                await peer.initialize()
                await peer.wait_for_tool(t.ready_tool)
                await check_echo(peer, t)
                await latencies(peer, t, settings.warmup)
            for size in blocks(settings.calls, LATENCY_BLOCK):
                for t, peer in pairs:
                    tally = tallies[t.name]
                    io_before, cpu_before = io_counters(peer.pid), cpu_seconds(peer.pid)
                    tally.latencies_ns += await latencies(peer, t, size)
                    tally.cpu_s += cpu_seconds(peer.pid) - cpu_before
                    tally.io.update(Counter(io_counters(peer.pid)) - Counter(io_before))
            for size in blocks(settings.calls, THROUGHPUT_BLOCK):
                for t, peer in pairs:
                    tally = tallies[t.name]
                    tally.throughput_s += await concurrent_echo(peer, t, size, settings.concurrency)
                    tally.throughput_calls += size
            slow_one = {t.name: await concurrent_slow(peer, t, settings.slow_seconds, 1)
                        for t, peer in pairs}
            slow_many = {t.name: await concurrent_slow(peer, t, settings.slow_seconds,
                                                       settings.slow_parallel)
                         for t, peer in pairs}
            rss = {t.name: rss_kib(peer.pid) for t, peer in pairs}
    return {name: _sample(tally, slow_one[name], slow_many[name], rss[name])
            for name, tally in tallies.items()}


async def measure_http_round(targets: Sequence[Target], settings: Settings) -> HttpFace:
    """One round of the HTTP face over `targets` (each with its `era`), interleaved block by block."""
    n = settings.http_concurrency
    face = {t.name: {1: _LegTally(), n: _LegTally()} for t in targets}
    async with contextlib.AsyncExitStack() as stack:
        peers = [await stack.enter_async_context(running_http(t.argv, pool_size=n, era=t.era))
                 for t in targets]
        pairs = list(zip(targets, peers, strict=True))
        with trio.fail_after(PHASE_TIMEOUT_S):
            for t, peer in pairs:
                await peer.initialize()
                await peer.wait_for_tool(t.ready_tool)
                await check_echo_http(peer, t)
                await latencies(peer, t, settings.warmup)
            for size in blocks(settings.calls, LATENCY_BLOCK):
                for t, peer in pairs:
                    leg = face[t.name][1]
                    with leg.block(peer.pid):
                        leg.latencies_ns += await latencies(peer, t, size)
            for t, peer in pairs:
                await concurrent_latencies(peer, t, 2 * n, n)  # (re)opens the whole pool
            for size in blocks(settings.calls, HTTP_BLOCK):
                for t, peer in pairs:
                    leg = face[t.name][n]
                    with leg.block(peer.pid):
                        leg.latencies_ns += await concurrent_latencies(peer, t, size, n)
            rss = {t.name: rss_kib(peer.pid) for t, peer in pairs}
            total = {t.name: tree_rss_kib(peer.pid) for t, peer in pairs}
            health = {t.name: _health(peer) for t, peer in pairs}
    return HttpFace(concurrency=n,
                    legs={name: {str(level): tally.leg() for level, tally in levels.items()}
                          for name, levels in face.items()},
                    rss_kib=rss, rss_total_kib=total, health=health)


def tree_rss_kib(pid: int) -> int:
    """VmRSS of `pid` and of every process below it, in KiB (a process that exits meanwhile: 0)."""
    total = 0
    for member in (pid, *descendants(pid)):
        with contextlib.suppress(OSError, PeerError):
            total += rss_kib(member)
    return total


def _health(peer: HttpPeer) -> HttpHealth:
    return HttpHealth(
        failed_calls=peer.failed_calls(),
        failures=dict(peer.failures),
        failure_examples=list(peer.failure_examples),
        statuses={str(status): count for status, count in sorted(peer.statuses.items())},
        connections=peer.connections(),
        stalls=peer.stalls,
        slowest_ms=peer.slowest_s * 1000,
        log_levels=dict(peer.log_levels),
        log_problems=list(peer.log_problems),
    )


def _sample(tally: _Tally, slow_one: float, slow_many: float, rss: int) -> Sample:
    ordered = sorted(tally.latencies_ns)
    calls = len(ordered)
    return Sample(
        cold_start_s=statistics.median(tally.cold),
        p50_us=percentile(ordered, 50) / 1000,
        p99_us=percentile(ordered, 99) / 1000,
        mean_us=statistics.fmean(ordered) / 1000,
        throughput=tally.throughput_calls / tally.throughput_s,
        slow_one_s=slow_one,
        slow_many_s=slow_many,
        cpu_us_per_call=tally.cpu_s / calls * 1e6,
        rss_kib=rss,
        disk_bytes_per_call=(tally.io["read_bytes"] + tally.io["write_bytes"]) / calls,
        syscalls_per_call=(tally.io["syscr"] + tally.io["syscw"]) / calls,
    )


def blocks(total: int, size: int) -> Iterator[int]:
    """Block sizes of at most `size` that add up to `total`."""
    while total > 0:
        yield min(size, total)
        total -= size


async def cold_start(target: Target) -> float:
    """Seconds from spawn to the first tools/list that shows the upstream's echo tool."""
    started = time.perf_counter()
    async with running(target.argv) as peer:
        with trio.fail_after(COLD_START_TIMEOUT_S):
            await peer.initialize()
            await peer.wait_for_tool(target.ready_tool)
        return time.perf_counter() - started


async def check_echo(peer: Peer, target: Target) -> None:
    """One real call, so a misrouted target fails loudly instead of timing an error path."""
    result = await peer.call_tool(target.call_params("echo", {"text": ECHO_TEXT}))
    text = [block.get("text") for block in result.get("content", [])]
    if text != [ECHO_TEXT]:
        raise PeerError(f"{target.name}: echo answered {result!r}")


async def check_echo_http(peer: HttpPeer, target: Target) -> None:
    """The same check over HTTP (the measured calls count failures instead of raising)."""
    result = await peer.request("tools/call", target.call_params("echo", {"text": ECHO_TEXT}))
    text = [block.get("text") for block in result.get("content", [])]
    if result.get("isError") or text != [ECHO_TEXT]:
        raise PeerError(f"{target.name}: echo answered {result!r}")


async def latencies(peer: Caller, target: Target, calls: int) -> list[int]:
    """Nanoseconds per echo call, one call at a time."""
    params = target.call_params("echo", {"text": ECHO_TEXT})
    samples: list[int] = []
    clock = time.perf_counter_ns
    for _ in range(calls):
        started = clock()
        await peer.call_tool(params)
        samples.append(clock() - started)
    return samples


async def concurrent_echo(peer: Peer, target: Target, calls: int, concurrency: int) -> float:
    """Seconds for `calls` echo calls kept `concurrency` deep."""
    params = target.call_params("echo", {"text": ECHO_TEXT})
    remaining = calls

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await peer.call_tool(params)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    return time.perf_counter() - started


async def concurrent_latencies(peer: Caller, target: Target, calls: int, concurrency: int) -> list[int]:
    """Nanoseconds per echo call, for `calls` calls kept `concurrency` deep."""
    params = target.call_params("echo", {"text": ECHO_TEXT})
    remaining = calls
    samples: list[int] = []
    clock = time.perf_counter_ns

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            started = clock()
            await peer.call_tool(params)
            samples.append(clock() - started)

    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    return samples


async def concurrent_slow(peer: Peer, target: Target, seconds: float, count: int) -> float:
    """Wall time for `count` concurrent `slow {seconds}` calls."""
    params = target.call_params("slow", {"seconds": seconds})
    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(peer.call_tool, params)
    return time.perf_counter() - started


def percentile(ordered: list[int], q: float) -> float:
    """The q-th percentile of sorted values, interpolating linearly between ranks."""
    if not ordered:
        raise ValueError("no samples")
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
