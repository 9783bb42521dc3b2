"""The scale table: the gateway with 1 upstream x 10 tools, 10 x 100 and 50 x 100.

    python bench/scale.py [--spawns 2] [--json out.json]
    python bench/scale.py --quick        # 1 x 10 and 3 x 20, one spawn: a few seconds

Every upstream is `node bench/fast_upstream.mjs --tools N` (`echo`, `slow`, `tool_3` ...
`tool_N`), attached to a stdio gateway on a throwaway home (hooks and audit off, no expose
entries: every tool sits behind the meta-tools). For each configuration:

- **ready**: spawn to a complete listing through `toolfunnel_list_tools` (the gateway's listing
  of every upstream's tools). The client cannot see upstream readiness over stdio, so it polls:
  `toolfunnel_list_tools {filter: "_tool_N"}` (one brief per listed upstream: its last tool) every
  `POLL_S` until every upstream shows, then one full `toolfunnel_list_tools {}` that must hold all
  upstreams x N tools (else it polls on). An upstream's tools arrive in one `tools/list`, so the
  cheap poll cannot count an upstream early. The time `initialize` took to answer is shown too.
- **upstreams' own start**: the same number of bare `node fast_upstream.mjs --tools N` processes,
  spawned at once, until every one has answered `initialize` and `tools/list`: the baseline.
- **RSS** of the gateway process, and of the gateway with its children (the upstreams).
- **query latency**: `toolfunnel_list_tools {query}` over the whole catalog, several different
  queries taken in turn; the first query after ready is shown apart (an index may be built then),
  p50/p99 over the rest.

Spawns alternate between configurations (own start, then the gateway, per configuration), and
`ready` is the median over spawns. Every process is killed and reaped however the run ends.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import trio
from measure import percentile, tree_rss_kib
from peer import Peer, PeerError, rss_kib, running
from report import table
from targets import FAST_ARGV, PYTHON, seed_home, upstream_entry, write_expose

LIST_TOOLS = "toolfunnel_list_tools"
FULL_CONFIGS = ((1, 10), (10, 100), (50, 100))
QUICK_CONFIGS = ((1, 10), (3, 20))
POLL_S = 0.02  # between readiness polls: short next to the times measured
POLL_BACKOFF = 3.0  # at least this many times the last poll's duration between polls
SPAWN_TIMEOUT_S = 180.0  # one spawn to ready (50 upstreams on a busy 2-core machine)
QUERY_TIMEOUT_S = 300.0
# Different requests as a model would type them: words in every description, words in a few
# names, words in none (the ranking still runs over the whole catalog).
QUERIES = ("echo the text back", "tool 42", "sleep then answer", "what to echo",
           "slow call with seconds", "tool 7 of 100", "repeat my words", "list files in a directory")


@dataclass(frozen=True)
class ScaleSample:
    upstreams: int
    tools: int  # per upstream
    ready_s: float  # median over spawns: spawn to a complete toolfunnel_list_tools
    ready_all_s: list[float]
    initialize_s: float  # median over spawns: spawn to the initialize answer
    own_start_s: float  # median over spawns: the bare upstreams' spawn to all listed
    listed: int  # upstream tools in the complete listing
    rss_kib: int  # the gateway, after the queries
    rss_total_kib: int  # the gateway with its children
    query_first_ms: float
    query_p50_ms: float
    query_p99_ms: float
    queries: int  # timed queries (the first excluded)


def build_home(home: Path, upstreams: int, tools: int) -> None:
    seed_home(home)
    entries = [upstream_entry(f"u{index:02d}", (*FAST_ARGV, "--tools", str(tools)), True)
               for index in range(upstreams)]
    write_expose(home, {"version": 1, "upstreams": entries, "expose": []})


async def list_tools(peer: Peer, args: dict[str, Any]) -> list[dict[str, Any]]:
    result = await peer.request("tools/call", {"name": LIST_TOOLS, "arguments": args})
    if result.get("isError"):
        raise PeerError(f"{LIST_TOOLS} failed: {result.get('content')}")
    listed: list[dict[str, Any]] = result["structuredContent"]["tools"]
    return listed


def upstream_count(briefs: list[dict[str, Any]]) -> int:
    return sum(1 for brief in briefs if str(brief.get("category", "")).startswith("mcp:"))


async def own_start(upstreams: int, tools: int) -> float:
    """Seconds from spawning `upstreams` bare fast upstreams at once to all of them listed."""
    argv = (*FAST_ARGV, "--tools", str(tools))

    async def one(peer: Peer) -> None:
        await peer.initialize()
        listed = await peer.request("tools/list")
        if len(listed.get("tools", [])) != tools:
            raise PeerError(f"a bare upstream listed {len(listed.get('tools', []))} tools, not {tools}")

    started = time.perf_counter()
    async with contextlib.AsyncExitStack() as stack:
        peers = [await stack.enter_async_context(running(argv)) for _ in range(upstreams)]
        with trio.fail_after(SPAWN_TIMEOUT_S):
            async with trio.open_nursery() as nursery:
                for peer in peers:
                    nursery.start_soon(one, peer)
        return time.perf_counter() - started


async def wait_complete(peer: Peer, upstreams: int, tools: int) -> int:
    """Poll until `toolfunnel_list_tools` lists every upstream's tools; the count listed."""
    last = f"_tool_{tools}"  # the highest-numbered tool: its id is "<upstream>_tool_<N>", once each
    while True:
        started = time.perf_counter()
        if upstream_count(await list_tools(peer, {"filter": last})) >= upstreams:
            listed = upstream_count(await list_tools(peer, {}))
            if listed >= upstreams * tools:
                return listed
        # A listing over thousands of tools costs the gateway tens of milliseconds: back off so
        # that polling takes at most 1 / (1 + POLL_BACKOFF) of its time while it starts upstreams.
        await trio.sleep(max(POLL_S, POLL_BACKOFF * (time.perf_counter() - started)))


async def gateway_spawn(home: Path, upstreams: int, tools: int,
                        query_rounds: int) -> tuple[float, float, int, dict[str, Any] | None]:
    """One gateway start: (ready s, initialize s, listed, the RSS and query figures or None)."""
    started = time.perf_counter()
    async with running((PYTHON, "-m", "tfunnel", "--home", str(home), "serve")) as peer:
        with trio.fail_after(SPAWN_TIMEOUT_S):
            await peer.initialize()
            initialized = time.perf_counter() - started
            listed = await wait_complete(peer, upstreams, tools)
            ready = time.perf_counter() - started
        extra = None
        if query_rounds:
            with trio.fail_after(QUERY_TIMEOUT_S):
                extra = await query_latency(peer, query_rounds)
            extra["rss_kib"] = rss_kib(peer.pid)
            extra["rss_total_kib"] = tree_rss_kib(peer.pid)
        return ready, initialized, listed, extra


async def query_latency(peer: Peer, rounds: int) -> dict[str, Any]:
    clock = time.perf_counter_ns
    started = clock()
    await list_tools(peer, {"query": QUERIES[0]})
    first_ns = clock() - started
    samples: list[int] = []
    for _ in range(rounds):
        for query in QUERIES:
            started = clock()
            await list_tools(peer, {"query": query})
            samples.append(clock() - started)
    samples.sort()
    return {"query_first_ms": first_ns / 1e6, "query_p50_ms": percentile(samples, 50) / 1e6,
            "query_p99_ms": percentile(samples, 99) / 1e6, "queries": len(samples)}


async def measure_scale(configs: Sequence[tuple[int, int]], spawns: int, query_rounds: int,
                        progress: Any = None) -> list[ScaleSample]:
    """The scale table's rows, one per (upstreams, tools per upstream)."""
    say = progress or (lambda message: None)
    with tempfile.TemporaryDirectory(prefix="tfunnel-scale-") as tmp:
        homes = {}
        for upstreams, tools in configs:
            home = homes[upstreams, tools] = Path(tmp) / f"home-{upstreams}x{tools}"
            build_home(home, upstreams, tools)
        own: dict[tuple[int, int], list[float]] = {c: [] for c in configs}
        ready: dict[tuple[int, int], list[float]] = {c: [] for c in configs}
        init: dict[tuple[int, int], list[float]] = {c: [] for c in configs}
        listed: dict[tuple[int, int], int] = {}
        extra: dict[tuple[int, int], dict[str, Any]] = {}
        for spawn in range(spawns):
            for config in configs:
                upstreams, tools = config
                own[config].append(await own_start(upstreams, tools))
                last = spawn == spawns - 1
                r, i, n, figures = await gateway_spawn(homes[config], upstreams, tools,
                                                       query_rounds if last else 0)
                ready[config].append(r)
                init[config].append(i)
                listed[config] = n
                if figures is not None:
                    extra[config] = figures
                say(f"  scale {upstreams}x{tools}: own start {own[config][-1] * 1000:.0f} ms, "
                    f"initialize {i * 1000:.0f} ms, ready {r * 1000:.0f} ms"
                    + (f", query p50 {figures['query_p50_ms']:.1f} ms" if figures else ""))
    return [ScaleSample(upstreams=u, tools=t, ready_s=statistics.median(ready[u, t]),
                        ready_all_s=ready[u, t], initialize_s=statistics.median(init[u, t]),
                        own_start_s=statistics.median(own[u, t]), listed=listed[u, t],
                        **extra[u, t]) for u, t in configs]


def scale_table(samples: Sequence[ScaleSample]) -> str:
    base = samples[0]
    rows = [[f"{s.upstreams} x {s.tools}", str(s.listed), f"{s.own_start_s * 1000:.0f}",
             f"{s.initialize_s * 1000:.0f}", f"{s.ready_s * 1000:.0f}", f"{s.ready_s / base.ready_s:.2f}",
             f"{s.rss_kib / 1024:.1f}", f"{s.rss_total_kib / 1024:.1f}", f"{s.query_first_ms:.1f}",
             f"{s.query_p50_ms:.1f}", f"{s.query_p99_ms:.1f}"] for s in samples]
    return "\n".join([
        "Scale: a stdio gateway with N fast upstreams x T tools (no expose entries); times median over "
        "spawns, the gateway's RSS after the queries, query latency over the whole catalog:",
        "",
        table(["upstreams x tools", "listed", "own start (ms)", "initialize (ms)", "ready (ms)",
               f"ready / {base.upstreams}x{base.tools}", "RSS gateway (MiB)", "RSS + upstreams (MiB)",
               "first query (ms)", "query p50 (ms)", "query p99 (ms)"], rows),
    ])


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="1 x 10 and 3 x 20, one spawn")
    p.add_argument("--spawns", type=int, help="gateway starts per configuration (default 2)")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write every number to PATH")
    args = p.parse_args(argv)
    configs = QUICK_CONFIGS if args.quick else FULL_CONFIGS
    spawns = args.spawns or (1 if args.quick else 2)
    samples: list[ScaleSample] = []
    try:
        samples = trio.run(measure_scale, configs, spawns, 2 if args.quick else 10, say)
    except* KeyboardInterrupt:
        say("interrupted")  # every process was already stopped on the way out
    if not samples:
        return 130
    print(scale_table(samples))
    if args.json:
        args.json.write_text(json.dumps([asdict(s) for s in samples], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
