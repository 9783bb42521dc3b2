"""The surface's change signal: what every transport's `list_changed` loop waits on."""

from __future__ import annotations

from collections.abc import Callable

import trio

# How long a change waits before clients hear of it, so that the changes of one burst (an
# upstream re-listing over and over, several upstreams coming up together, an editor's
# save-rename-save) reach each client as one `list_changed`, at most one per this window: long
# enough to cover a burst, short enough that nobody notices the delay.
DEBOUNCE_S = 0.075


# The lists a change is about; each has its `notifications/<kind>/list_changed`.
KINDS = ("tools", "prompts", "resources")


def announced(method: str) -> str | None:
    """The list an upstream's `notifications/<kind>/list_changed` is about (None: another method).
    A wrapped upstream's announcement reaches clients as it is, changed list or not."""
    kind = method.removeprefix("notifications/").removesuffix("/list_changed")
    return kind if kind in KINDS and method == f"notifications/{kind}/list_changed" else None


class Changes:
    """A coalescing change counter: a waiter learns that something changed since it last looked,
    however many changes happened in between, and which lists (`changed_since`). Every
    transport's `list_changed` loop waits on it through `next_burst`, the one place that
    debounces."""

    def __init__(self, debounce_s: float = DEBOUNCE_S) -> None:
        self.version = 0
        self.debounce_s = debounce_s
        self._event = trio.Event()
        self._last: dict[str, int] = {}  # kind → the version of its last change

    def bump(self, *kinds: str) -> None:
        """Something changed: the lists `kinds` (default: the tools)."""
        self.version += 1
        for kind in kinds or ("tools",):
            self._last[kind] = self.version
        self._event.set()
        self._event = trio.Event()

    def changed_since(self, seen: int) -> tuple[str, ...]:
        """The lists that changed after version `seen`, in `KINDS` order."""
        return tuple(kind for kind in KINDS if self._last.get(kind, 0) > seen)

    async def wait_beyond(self, seen: int) -> int:
        """Wait until the version passes `seen`; return it (at once, not debounced)."""
        while self.version <= seen:
            await self._event.wait()
        return self.version

    async def next_burst(self, seen: int, *, relevant: Callable[[], bool] = lambda: True) -> int:
        """Wait for a change beyond `seen` that is `relevant` when it happens (say, the client
        has initialized: one that had not lists the new surface anyway), then `debounce_s` more,
        so the rest of its burst joins it; return the version then."""
        while True:
            seen = await self.wait_beyond(seen)
            if relevant():
                break
        await trio.sleep(self.debounce_s)
        return self.version
