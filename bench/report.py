"""Tables for the bench's reports, and issue 18's targets judged from the numbers of one run.

Every verdict here is computed from the measurements handed in: a target is a limit on a ratio
(within each round, then the median over rounds), and `met` is that median against the limit.
The targets, all against the bare relays of the same run with the fast upstream:

- stdio, for tfunnel/curated and tfunnel/run_tool: p50 <= 1.15x the relay's, p99 <= 1.5x,
  throughput at concurrency 16 >= 0.5x, cold start to ready <= 1.0x, RSS <= 1.1x;
- the HTTP face, legacy and modern client: within 1.5x of the bare hypercorn relay (p50 at
  concurrency 1 and at the HTTP concurrency <= 1.5x, throughput at that concurrency >= 1/1.5x);
- scale: ready with the largest configuration (50 x 100) <= 2 x ready with the smallest (1 x 10)
  + the largest's upstreams' own start; `toolfunnel_list_tools {query}` p50 <= 5 ms over the
  largest catalog.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

GATEWAYS = ("tfunnel/curated", "tfunnel/run_tool")
RELAY = "relay"
HTTP_RELAY = "http/relay"
HTTP_GATEWAYS = ("http/legacy", "http/modern")
HTTP_WITHIN = 1.5
QUERY_P50_MS = 5.0


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


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """An aligned Markdown pipe table (readable in a terminal too)."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


class _Sample(Protocol):
    p50_us: float
    p99_us: float
    throughput: float
    cold_start_s: float
    rss_kib: int


class _Leg(Protocol):
    rate: float
    p50_us: float


class _Face(Protocol):
    concurrency: int
    legs: Mapping[str, Mapping[str, _Leg]]


class _Scale(Protocol):
    upstreams: int
    tools: int
    ready_s: float
    own_start_s: float
    query_p50_ms: float


@dataclass(frozen=True)
class Goal:
    """One target: the ratio's per-round values (or one value), its limit, and which way."""

    area: str
    what: str
    subject: str
    limit: float
    at_most: bool
    values: tuple[float, ...]
    note: str = ""

    @property
    def summary(self) -> Summary:
        return Summary.of(self.values)

    @property
    def met(self) -> bool:
        median = self.summary.median
        return median <= self.limit if self.at_most else median >= self.limit

    def row(self) -> list[str]:
        shown = self.summary.show(2) if len(self.values) > 1 else f"{self.values[0]:.2f}"
        return [self.area, self.what, self.subject, f"{'≤' if self.at_most else '≥'} {self.limit:g}",
                shown + (f" ({self.note})" if self.note else ""), "met" if self.met else "MISSED"]

    def to_json(self) -> dict[str, Any]:
        return {"area": self.area, "what": self.what, "subject": self.subject, "limit": self.limit,
                "at_most": self.at_most, "values": list(self.values), "median": self.summary.median,
                "note": self.note, "met": self.met}


def stdio_goals(rounds: Sequence[Mapping[str, _Sample]]) -> list[Goal]:
    """The stdio targets, from the fast upstream's rounds."""
    def ratio(field: str, name: str) -> tuple[float, ...]:
        return tuple(float(getattr(r[name], field)) / float(getattr(r[RELAY], field)) for r in rounds)

    goals = []
    for name in GATEWAYS:
        goals += [
            Goal("stdio", "tools/call p50 / relay", name, 1.15, True, ratio("p50_us", name)),
            Goal("stdio", "tools/call p99 / relay", name, 1.5, True, ratio("p99_us", name)),
            Goal("stdio", "throughput @16 / relay", name, 0.5, False, ratio("throughput", name)),
            Goal("stdio", "cold start to ready / relay", name, 1.0, True, ratio("cold_start_s", name)),
            Goal("stdio", "RSS / relay", name, 1.1, True, ratio("rss_kib", name)),
        ]
    return goals


def http_goals(faces: Sequence[_Face]) -> list[Goal]:
    """The HTTP face within 1.5x of the bare hypercorn relay, legacy and modern client."""
    if not faces:
        return []
    n = str(faces[0].concurrency)

    def ratio(name: str, level: str, field: str) -> tuple[float, ...]:
        return tuple(float(getattr(f.legs[name][level], field))
                     / float(getattr(f.legs[HTTP_RELAY][level], field)) for f in faces)

    goals = []
    for name in HTTP_GATEWAYS:
        goals += [
            Goal("HTTP", "p50 @1 / hypercorn relay", name, HTTP_WITHIN, True, ratio(name, "1", "p50_us")),
            Goal("HTTP", f"p50 @{n} / hypercorn relay", name, HTTP_WITHIN, True, ratio(name, n, "p50_us")),
            Goal("HTTP", f"calls/s @{n} / hypercorn relay", name, round(1 / HTTP_WITHIN, 2), False,
                 ratio(name, n, "rate")),
        ]
    return goals


def scale_goals(samples: Sequence[_Scale]) -> list[Goal]:
    """ready(largest) <= 2 x ready(smallest) + the largest's own start; query p50 <= 5 ms."""
    if len(samples) < 2:
        return []
    small, large = samples[0], samples[-1]
    allowed = 2 * small.ready_s + large.own_start_s
    return [
        Goal("scale", f"ready {large.upstreams}x{large.tools} / (2 x ready {small.upstreams}x{small.tools} "
             f"+ own start {large.upstreams}x{large.tools})", "tfunnel", 1.0, True,
             (large.ready_s / allowed,),
             note=f"{large.ready_s * 1000:.0f} ms vs {allowed * 1000:.0f} ms"),
        Goal("scale", f"toolfunnel_list_tools {{query}} p50 (ms), {large.upstreams * large.tools} tools",
             "tfunnel", QUERY_P50_MS, True, (large.query_p50_ms,)),
    ]


def goals_table(goals: Sequence[Goal]) -> str:
    met = sum(g.met for g in goals)
    return "\n".join([
        f"Issue 18's targets, fast upstream, ratios within each round (median [min-max]): "
        f"{met} of {len(goals)} met",
        "",
        table(["area", "check", "target", "limit", "measured", "verdict"], [g.row() for g in goals]),
    ])

