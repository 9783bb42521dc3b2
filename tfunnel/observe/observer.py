"""What the gateway reports about its own traffic: call counts for /health and an observer seam
for /metrics (a no-op unless the HTTP service plugs Prometheus metrics in)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

# The tool label of a call whose name is not a tool (made up, misspelt, or of an upstream that is
# down): one label for all of them, so arbitrary client input never becomes a metrics time series.
UNKNOWN_TOOL = "unknown"


@dataclass
class CallTally:
    """Tool calls answered, for /health: all of them, those that failed, those the gate denied."""

    total: int = 0
    errors: int = 0
    denied: int = 0


class Observer(Protocol):
    def request(self, method: str, seconds: float, *, error: bool) -> None: ...

    def tool_call(self, tool: str, seconds: float, *, outcome: str) -> None: ...

    def gate(self, decision: str) -> None: ...

    def hook(self, event: str, seconds: float) -> None: ...

    def inflight(self, delta: int) -> None: ...


class NullObserver:
    """Observes nothing (the stdio gateway has no /metrics)."""

    def request(self, method: str, seconds: float, *, error: bool) -> None:
        return None

    def tool_call(self, tool: str, seconds: float, *, outcome: str) -> None:
        return None

    def gate(self, decision: str) -> None:
        return None

    def hook(self, event: str, seconds: float) -> None:
        return None

    def inflight(self, delta: int) -> None:
        return None
