"""The search benchmark (bench/search_bench.py) on its committed fixture: the product's search
reaches recall@5 >= 0.9 on the tune queries and beats the plain BM25 baseline on the held-out ones."""

from __future__ import annotations

from bench import search_bench


def test_fixture_and_queries_cover_the_servers() -> None:
    """At least six real servers; every query names a tool the fixture lists."""
    fixture = search_bench.load_tools()
    assert len(fixture) >= 6
    listed = {(upstream, str(d["name"])) for upstream, tools in fixture.items() for d in tools}
    queries = search_bench.load_queries("tune") + search_bench.load_queries("heldout")
    assert len(queries) >= 160
    assert {(q["upstream"], q["tool"]) for q in queries} <= listed
    assert {q["upstream"] for q in queries} == set(fixture)


def test_product_search_reaches_the_target_on_tune() -> None:
    """recall@5 >= 0.9 on the queries the search was tuned on."""
    score = search_bench.run(["tune"])["tune"]["product"]
    assert score.recall_at_5 >= 0.9


def test_product_search_beats_the_baseline_on_heldout() -> None:
    """On queries tuning never looked at, the product beats plain BM25 at recall@5 and MRR."""
    scores = search_bench.run(["heldout"])["heldout"]
    assert scores["product"].recall_at_5 > scores["baseline"].recall_at_5
    assert scores["product"].mrr > scores["baseline"].mrr
