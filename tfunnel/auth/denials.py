"""How denials reach the audit log without flooding it: the first `LIMIT` of each minute are
recorded one by one, the rest only counted, and one `deny_summary` record per minute says how many
were left out and of which error. Pure (the clock is an input); the metrics still count every one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

LIMIT = 20
WINDOW_S = 60.0


class DenyLimiter:
    """Which denial records to write, and when a summary is due."""

    def __init__(self, clock: Callable[[], float], limit: int = LIMIT, window_s: float = WINDOW_S) -> None:
        self._clock = clock
        self.limit = limit
        self.window_s = window_s
        self._start: float | None = None
        self._seen = 0
        self._suppressed: Counter[str] = Counter()

    @property
    def window_ends(self) -> float | None:
        """When the current window ends (None before the first denial)."""
        return None if self._start is None else self._start + self.window_s

    def note(self, record: dict[str, Any]) -> list[dict[str, Any]]:
        """The records to write for one denial (`record` holds its `error`): the summary of a
        window that ended, if due, then the denial itself while within this window's limit."""
        out = self.flush()
        if self._start is None:
            self._start = self._clock()
        self._seen += 1
        if self._seen <= self.limit:
            out.append({"event": "deny", **record})
        else:
            self._suppressed[str(record.get("error", ""))] += 1
        return out

    def flush(self) -> list[dict[str, Any]]:
        """The summary of the window, once it has ended (and a new window begins); else nothing."""
        if self._start is None or self._clock() - self._start < self.window_s:
            return []
        out = []
        if self._suppressed:
            out.append({"event": "deny_summary", "counts": dict(self._suppressed),
                        "suppressed": sum(self._suppressed.values()), "window_s": self.window_s})
        self._start, self._seen, self._suppressed = None, 0, Counter()
        return out
