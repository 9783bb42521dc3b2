"""Search benchmark: how often `toolfunnel_list_tools {query}` puts the expected tool on top.

    .venv/bin/python bench/search_bench.py [--part tune|heldout|both] [--json PATH] [--misses]

The surface is built the product's way from the real tool lists in `bench/search/tools.json`
(`upstream_tools.assemble`, then `Catalog.briefs(query=..)`, the path `toolfunnel_list_tools`
takes), and every hit is mapped back to (upstream, tool). Each part of the queries
(`bench/search/queries_*.json`) reports recall@1, recall@5 and MRR over the top 20, beside a plain
BM25 baseline kept here (name + description, lower-case alphanumeric tokens, no stemming, no
splitting of names, no stop words or synonyms) so it does not move when the product's search does.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this tree's tfunnel, whatever the virtualenv has installed

from tfunnel.config.model import Register, ToolState  # noqa: E402
from tfunnel.surface.catalog import Catalog  # noqa: E402
from tfunnel.surface.upstream_tools import assemble  # noqa: E402

HERE = Path(__file__).resolve().parent / "search"
TOOLS = HERE / "tools.json"
PARTS = {"tune": HERE / "queries_tune.json", "heldout": HERE / "queries_heldout.json"}
DEPTH = 20  # MRR counts a hit this deep; recall@1 and @5 are read off the same ranking
Key = tuple[str, str]  # (upstream, the upstream's own tool name)
Ranker = Callable[[str], list[Key]]


@dataclass(frozen=True)
class Score:
    queries: int
    recall_at_1: float
    recall_at_5: float
    mrr: float


def load_tools(path: Path = TOOLS) -> dict[str, list[dict[str, Any]]]:
    tools: dict[str, list[dict[str, Any]]] = json.loads(path.read_text())
    return tools


def load_queries(part: str) -> list[dict[str, str]]:
    queries: list[dict[str, str]] = json.loads(PARTS[part].read_text())
    return queries


def product_ranker(fixture: Mapping[str, Sequence[Mapping[str, Any]]]) -> Ranker:
    """The product's search, the way `toolfunnel_list_tools {query}` reaches it."""
    tools = assemble(fixture, expose=(), taken=set())
    catalog = Catalog(Register(), ToolState(), upstream=tools)
    by_surfaced = {tool.surfaced: (tool.upstream, tool.tool) for tool in tools}

    def rank(query: str) -> list[Key]:
        return [by_surfaced[brief["id"]] for brief in catalog.briefs(query=query, limit=DEPTH)]
    return rank


_PLAIN = re.compile(r"[a-z0-9]+")


def baseline_ranker(fixture: Mapping[str, Sequence[Mapping[str, Any]]]) -> Ranker:
    """Plain Okapi BM25 (k1 1.2, b 0.75) over name + description; fixed, whatever the product does."""
    keys: list[Key] = []
    bags: list[Counter[str]] = []
    for upstream, definitions in fixture.items():
        for definition in definitions:
            keys.append((upstream, str(definition["name"])))
            text = f"{definition['name']} {definition.get('description') or ''}"
            bags.append(Counter(_PLAIN.findall(text.lower())))
    lengths = [sum(bag.values()) for bag in bags]
    average = sum(lengths) / len(lengths)
    df = Counter(term for bag in bags for term in bag)
    n = len(bags)

    def rank(query: str) -> list[Key]:
        terms = set(_PLAIN.findall(query.lower()))
        scored = []
        for index, bag in enumerate(bags):
            score = 0.0
            for term in terms:
                tf = bag.get(term, 0)
                if tf:
                    idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                    score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * lengths[index] / average))
            if score > 0:
                scored.append((-score, index))
        scored.sort()
        return [keys[index] for _, index in scored[:DEPTH]]
    return rank


def evaluate(rank: Ranker, queries: Sequence[Mapping[str, str]],
             misses: list[dict[str, Any]] | None = None) -> Score:
    at1 = at5 = 0
    reciprocal = 0.0
    for row in queries:
        expected = (row["upstream"], row["tool"])
        ranked = rank(row["query"])
        position = ranked.index(expected) + 1 if expected in ranked else 0
        at1 += position == 1
        at5 += 0 < position <= 5
        reciprocal += 1 / position if position else 0.0
        if misses is not None and position != 1:
            misses.append({"query": row["query"], "expected": "/".join(expected), "rank": position,
                           "got": ["/".join(key) for key in ranked[:3]]})
    count = len(queries) or 1
    return Score(len(queries), at1 / count, at5 / count, reciprocal / count)


def run(parts: Sequence[str], show_misses: bool = False) -> dict[str, dict[str, Score]]:
    fixture = load_tools()
    rankers = {"product": product_ranker(fixture), "baseline": baseline_ranker(fixture)}
    results: dict[str, dict[str, Score]] = {}
    for part in parts:
        queries = load_queries(part)
        results[part] = {}
        for name, rank in rankers.items():
            misses: list[dict[str, Any]] | None = [] if show_misses and name == "product" else None
            results[part][name] = evaluate(rank, queries, misses)
            for miss in misses or []:
                print(f"  miss [{part}] rank {miss['rank']:>2}  {miss['query']!r} -> "
                      f"{miss['expected']}; got {', '.join(miss['got'])}")
    return results


def table(results: Mapping[str, Mapping[str, Score]]) -> str:
    fixture = load_tools()
    lines = [f"Fixture: {len(fixture)} servers, {sum(map(len, fixture.values()))} tools.", "",
             "| part | queries | search | recall@1 | recall@5 | MRR@20 |",
             "|------|--------:|--------|---------:|---------:|-------:|"]
    for part, scores in results.items():
        for name, score in scores.items():
            lines.append(f"| {part} | {score.queries} | {name} | {score.recall_at_1:.3f} | "
                         f"{score.recall_at_5:.3f} | {score.mrr:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("tune", "heldout", "both"), default="both")
    parser.add_argument("--json", type=Path, help="also write the scores here")
    parser.add_argument("--misses", action="store_true",
                        help="print the product's queries that missed rank 1")
    args = parser.parse_args()
    parts = ("tune", "heldout") if args.part == "both" else (args.part,)
    results = run(parts, args.misses)
    print(table(results))
    if args.json is not None:
        args.json.write_text(json.dumps({part: {name: asdict(score) for name, score in scores.items()}
                                         for part, scores in results.items()}, indent=2) + "\n")


if __name__ == "__main__":
    main()
