"""The era decision after a `server/discover` probe (SPEC §6.1, PROTOCOL.md §3.5), table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from tfunnel.upstream.era import Answered, Fail, Legacy, Modern, Outcome, Refused, Retry, Silent, decide

V = "2026-07-28"
NEXT = "2027-01-01"  # a hypothetical later modern version, to exercise the retry
DISCOVER: dict[str, Any] = {"supportedVersions": [V], "capabilities": {"tools": {"listChanged": True}}}
DISCOVER_NEXT: dict[str, Any] = {"supportedVersions": [NEXT]}
UNSUPPORTED = "Unsupported protocol version"

CASES: list[tuple[str, Outcome, list[str], bool, tuple[str, ...], Any]] = [
    # (name, outcome, tried, modern_only, ours, expected)
    ("discover result offering ours", Answered(DISCOVER), [V], False, (V,), Modern(V, DISCOVER)),
    ("discover result, modernOnly", Answered(DISCOVER), [V], True, (V,), Modern(V, DISCOVER)),
    ("result offering another of ours", Answered(DISCOVER_NEXT), [V], False, (V, NEXT), Retry(NEXT)),
    ("header mismatch is modern", Refused(-32020, "Header mismatch"), [V], False, (V,), Modern(V, None)),
    ("missing capability is modern", Refused(-32021, "needs sampling"), [V], False, (V,), Modern(V, None)),
    ("unsupported version, mutual untried", Refused(-32022, UNSUPPORTED, {"supported": [NEXT, "1999"]}),
     [V], False, (V, NEXT), Retry(NEXT)),
    ("ours listed but refused: retried once", Refused(-32022, UNSUPPORTED, {"supported": [V]}),
     [V], False, (V,), Retry(V)),
    ("unsupported version, modernOnly retries too", Refused(-32022, UNSUPPORTED, {"supported": [NEXT]}),
     [V], True, (V, NEXT), Retry(NEXT)),
]

FALLBACKS: list[tuple[str, Outcome, str]] = [
    ("method not found", Refused(-32601, "Method not found"),
     "it answered server/discover with error -32601 'Method not found'"),
    ("invalid params (mcp 1.x before initialize)", Refused(-32602, "Invalid request parameters"),
     "it answered server/discover with error -32602 'Invalid request parameters'"),
    ("internal error", Refused(-32603, "boom"), "it answered server/discover with error -32603 'boom'"),
    ("silence", Silent(5.0), "it did not answer server/discover within 5 s"),
    ("empty result", Answered({}), "it answered server/discover with a result whose supportedVersions "
     f"(none) lack {V}"),
    ("result without ours", Answered({"supportedVersions": ["2020-01-01", 7]}),
     f"it answered server/discover with a result whose supportedVersions (2020-01-01) lack {V}"),
    ("supportedVersions not a list", Answered({"supportedVersions": V}),
     f"it answered server/discover with a result whose supportedVersions (none) lack {V}"),
]

FAILURES: list[tuple[str, Outcome, list[str], tuple[str, ...], str]] = [
    ("disjoint versions", Refused(-32022, UNSUPPORTED, {"supported": ["2099-01-01"], "requested": V}),
     [V], (V,), "upstream 'u' speaks the modern protocol era but none of our versions "
     f"(it supports: 2099-01-01; we speak: {V})"),
    ("ours listed but refused twice", Refused(-32022, UNSUPPORTED, {"supported": [V]}), [V, V], (V,),
     f"upstream 'u' speaks the modern protocol era but none of our versions (it supports: {V}; "
     f"we speak: {V})"),
    ("no data", Refused(-32022, UNSUPPORTED), [V], (V,),
     f"upstream 'u' speaks the modern protocol era but none of our versions (it supports: none named; "
     f"we speak: {V})"),
    ("retry refused again", Refused(-32022, UNSUPPORTED, {"supported": [V, NEXT]}), [V, NEXT], (V, NEXT),
     f"upstream 'u' speaks the modern protocol era but none of our versions (it supports: {V}, {NEXT}; "
     f"we speak: {V}, {NEXT})"),
]


@pytest.mark.parametrize(("outcome", "tried", "modern_only", "ours", "expected"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_modern_decisions(outcome: Outcome, tried: list[str], modern_only: bool, ours: tuple[str, ...],
                          expected: Any) -> None:
    """A DiscoverResult or a recognised modern error means modern (or a retry), never a fallback."""
    assert decide("u", outcome, tried=tried, modern_only=modern_only, ours=ours) == expected


@pytest.mark.parametrize(("outcome", "answered"), [case[1:] for case in FALLBACKS],
                         ids=[case[0] for case in FALLBACKS])
def test_anything_else_falls_back_to_legacy(outcome: Outcome, answered: str) -> None:
    """Other errors, non-DiscoverResults and silence fall back to initialize, naming the answer."""
    assert decide("u", outcome, tried=[V]) == Legacy(answered)


@pytest.mark.parametrize(("outcome", "answered"), [case[1:] for case in FALLBACKS],
                         ids=[case[0] for case in FALLBACKS])
def test_modern_only_refuses_the_fallback(outcome: Outcome, answered: str) -> None:
    """modernOnly turns every fallback into a failure that names what the upstream answered."""
    assert decide("u", outcome, tried=[V], modern_only=True) == Fail(
        f"upstream 'u' is modernOnly, but {answered}: it is not a modern (2026-07-28) server")


@pytest.mark.parametrize(("outcome", "tried", "ours", "message"), [case[1:] for case in FAILURES],
                         ids=[case[0] for case in FAILURES])
def test_unsupported_version_without_a_mutual_one_fails(outcome: Outcome, tried: list[str],
                                                        ours: tuple[str, ...], message: str) -> None:
    """-32022 with no untried mutual version fails the incarnation (no fallback, modernOnly or not)."""
    for modern_only in (False, True):
        assert decide("u", outcome, tried=tried, modern_only=modern_only, ours=ours) == Fail(message)


def test_the_default_versions_are_ours() -> None:
    """Without `ours`, the decision uses the gateway's modern versions (2026-07-28)."""
    assert decide("u", Answered(DISCOVER), tried=[V]) == Modern(V, DISCOVER)
    assert isinstance(decide("u", Refused(-32022, UNSUPPORTED, {"supported": ["2099-01-01"]}), tried=[V]),
                      Fail)
