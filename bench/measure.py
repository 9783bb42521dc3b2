"""One round of measurements against one target.

Cold start is timed on fresh processes; everything else runs on one long-lived process, in this
order: check, warm-up, latency (concurrency 1, with /proc io and CPU counters read around it),
throughput (concurrency N), one slow call, K concurrent slow calls, then its RSS.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import trio
from peer import Peer, PeerError, cpu_seconds, io_counters, rss_kib, running
from targets import Target

ECHO_TEXT = "hello from tfunnel-bench"
COLD_START_TIMEOUT_S = 30.0
# Generous: on a 2-core box three busy processes share the CPU; a hang still fails fast-ish.
PHASE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Settings:
    calls: int  # latency calls and throughput calls per round
    warmup: int
    concurrency: int
    spawns: int  # cold starts per round
    slow_seconds: float
    slow_parallel: int


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


async def measure(target: Target, settings: Settings) -> Sample:
    cold = [await cold_start(target) for _ in range(settings.spawns)]
    async with running(target.argv) as peer:
        with trio.fail_after(PHASE_TIMEOUT_S):
            await peer.initialize()
            await peer.wait_for_tool(target.ready_tool)
            await check_echo(peer, target)
            await latencies(peer, target, settings.warmup)
            before, cpu_before = io_counters(peer.pid), cpu_seconds(peer.pid)
            samples = await latencies(peer, target, settings.calls)
            after, cpu_after = io_counters(peer.pid), cpu_seconds(peer.pid)
            throughput = await concurrent_echo(peer, target, settings.calls, settings.concurrency)
            slow_one = await concurrent_slow(peer, target, settings.slow_seconds, 1)
            slow_many = await concurrent_slow(peer, target, settings.slow_seconds, settings.slow_parallel)
            rss = rss_kib(peer.pid)
    delta = {key: after[key] - before[key] for key in after}
    samples.sort()
    return Sample(
        cold_start_s=statistics.median(cold),
        p50_us=percentile(samples, 50) / 1000,
        p99_us=percentile(samples, 99) / 1000,
        mean_us=statistics.fmean(samples) / 1000,
        throughput=throughput,
        slow_one_s=slow_one,
        slow_many_s=slow_many,
        cpu_us_per_call=(cpu_after - cpu_before) / settings.calls * 1e6,
        rss_kib=rss,
        disk_bytes_per_call=(delta["read_bytes"] + delta["write_bytes"]) / settings.calls,
        syscalls_per_call=(delta["syscr"] + delta["syscw"]) / settings.calls,
    )


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


async def latencies(peer: Peer, target: Target, calls: int) -> list[int]:
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
    """Calls per second for `calls` echo calls kept `concurrency` deep."""
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
    return calls / (time.perf_counter() - started)


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
