"""Restart decisions for one upstream (pure): backoff delays and the two ceilings.

- Backoff: `initial * 2**(k-1)` times a jitter factor in [1 - JITTER, 1 + JITTER] (so a fleet of
  crashed children does not restart in step), capped at `max`; k counts consecutive failures and
  starts again when the last failure is longer ago than the window (the child stayed up).
- Restart ceiling: more than `max_restarts` restarts within `window_s` → stop (crash loop).
- Permanent-failure ceiling: failures that retrying cannot heal (no such command, missing cwd,
  isolation refusal) are retried for at most `permanent_failure_s`, then stop.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from tfunnel.config.expose import RestartPolicy

JITTER = 0.2


@dataclass(frozen=True)
class Verdict:
    """Restart after `delay_s`, or stop for `reason`."""

    delay_s: float | None
    reason: str | None = None


class RestartBudget:
    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self._restarts: collections.deque[float] = collections.deque()
        self._permanent_since: float | None = None
        self._consecutive = 0
        self._last_failure: float | None = None
        self.total = 0

    def failed(self, now: float, *, permanent: bool, jitter: float = 0.5) -> Verdict:
        """Record a failure at `now`; `jitter` in [0, 1) (0.5 = no jitter) picks the spread."""
        policy = self.policy
        if self._last_failure is not None and now - self._last_failure > policy.window_s:
            self._consecutive = 0
        self._last_failure = now
        self._consecutive += 1
        if permanent:
            if self._permanent_since is None:
                self._permanent_since = now
            elif now - self._permanent_since >= policy.permanent_failure_s:
                return Verdict(None, f"gave up after {policy.permanent_failure_s:g} s of failures that "
                                     "retrying cannot fix")
        else:
            self._permanent_since = None
        while self._restarts and now - self._restarts[0] > policy.window_s:
            self._restarts.popleft()
        if not permanent and len(self._restarts) >= policy.max_restarts:
            return Verdict(None, f"crash loop: more than {policy.max_restarts} restarts within "
                                 f"{policy.window_s:g} s")
        self._restarts.append(now)
        self.total += 1
        base = policy.initial_backoff_s * 2 ** min(self._consecutive - 1, 62)
        return Verdict(min(policy.max_backoff_s, base * (1 + JITTER * (2 * jitter - 1))))

    def connected(self) -> None:
        """The upstream came up: a permanent failure has healed."""
        self._permanent_since = None
