"""Which era an upstream speaks, decided from its answer to the `server/discover` probe (pure).

PROTOCOL.md §3.5: a DiscoverResult offering our version, or a recognised modern error, means a
modern server: retry a mutual version after -32022 (the first one probed too, once, when the
error lists it), never fall back. Anything else (another error, a result that is not a
DiscoverResult for our version, silence) means a legacy server, so the caller sends
`initialize` — unless the upstream is `modernOnly`, which turns the fallback into a failure
naming what the upstream answered. The fallback never keys on one error code: legacy
servers answer -32601, -32602, or nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfunnel.protocol.eras import MODERN_VERSIONS
from tfunnel.protocol.modern import MODERN_ERRORS, UNSUPPORTED_PROTOCOL_VERSION

# -- what the probe got ------------------------------------------------------------------------


@dataclass(frozen=True)
class Answered:
    """The upstream answered the probe with a result."""

    result: Mapping[str, Any]


@dataclass(frozen=True)
class Refused:
    """The upstream answered the probe with a JSON-RPC error."""

    code: int
    message: str
    data: Any = None


@dataclass(frozen=True)
class Silent:
    """No usable answer within the probe window."""

    window_s: float


Outcome = Answered | Refused | Silent

# -- what to do next ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Modern:
    """A modern upstream at `version`; `discover` is its DiscoverResult when it sent one."""

    version: str
    discover: Mapping[str, Any] | None


@dataclass(frozen=True)
class Retry:
    """A modern upstream that refused our version: probe again at `version`."""

    version: str


@dataclass(frozen=True)
class Legacy:
    """Not a modern upstream: fall back to `initialize`. `answered` says what it answered."""

    answered: str


@dataclass(frozen=True)
class Fail:
    """No era we can speak; `message` is the incarnation's error."""

    message: str


Decision = Modern | Retry | Legacy | Fail


def decide(upstream_id: str, outcome: Outcome, *, tried: Sequence[str], modern_only: bool = False,
           ours: tuple[str, ...] = MODERN_VERSIONS) -> Decision:
    """The next step after the probe at `tried[-1]` (every version probed so far is in `tried`,
    oldest first; `ours` is ordered oldest to newest, the newest is preferred)."""
    probed = tried[-1]
    if isinstance(outcome, Answered):
        offered = outcome.result.get("supportedVersions")
        offered = [v for v in offered if isinstance(v, str)] if isinstance(offered, list) else []
        if probed in offered:
            return Modern(probed, outcome.result)
        untried = _newest_untried(ours, offered, tried)
        if untried is not None:
            return Retry(untried)
        return _fallback(upstream_id, "it answered server/discover with a result whose supportedVersions "
                         f"({', '.join(offered) or 'none'}) lack {probed}", modern_only)
    if isinstance(outcome, Refused):
        if outcome.code == UNSUPPORTED_PROTOCOL_VERSION:
            supported = _supported(outcome.data)
            untried = _newest_untried(ours, supported, tried)
            if untried is not None:
                return Retry(untried)
            if probed in supported and len(tried) == 1:
                # Our first probe was refused at a version the error lists: that is still the
                # mutual version it tells us to choose and retry (once; another refusal fails).
                return Retry(probed)
            return Fail(f"upstream {upstream_id!r} speaks the modern protocol era but none of our "
                        f"versions (it supports: {', '.join(supported) or 'none named'}; we speak: "
                        f"{', '.join(ours)})")
        if outcome.code in MODERN_ERRORS:
            # A modern server that would not discover with us (header or capability trouble):
            # stay modern at the version it did not refuse; the next request will tell.
            return Modern(probed, None)
        return _fallback(upstream_id, f"it answered server/discover with error {outcome.code} "
                         f"{outcome.message!r}", modern_only)
    return _fallback(upstream_id, f"it did not answer server/discover within {outcome.window_s:g} s",
                     modern_only)


def _fallback(upstream_id: str, answered: str, modern_only: bool) -> Legacy | Fail:
    if modern_only:
        return Fail(f"upstream {upstream_id!r} is modernOnly, but {answered}: it is not a modern "
                    "(2026-07-28) server")
    return Legacy(answered)


def _newest_untried(ours: tuple[str, ...], theirs: list[str], tried: Sequence[str]) -> str | None:
    return next((v for v in reversed(ours) if v in theirs and v not in tried), None)


def _supported(data: Any) -> list[str]:
    versions = data.get("supported") if isinstance(data, Mapping) else None
    return [v for v in versions if isinstance(v, str)] if isinstance(versions, list) else []
