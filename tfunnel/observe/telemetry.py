"""Token telemetry: what the model was given, per profile and per session, and how it found tools.

Given: the `tools/list` answers, the instructions sent at `initialize` (or `server/discover`) and
the meta-tools' results. The full-surface equivalent: the same `tools/list` answers had every
enabled tool been on the top level (`surface.full`), plus the same instructions (a full surface
has no meta-tool results to give). Counting is off the call path: each `record_*` call only puts
a thunk on one bounded queue (a full queue drops it, counted in `dropped`, never blocking) and
the worker (`run`, started by the app) builds and counts the text in a thread. A `tools/list` is
the same for every session of a profile while the catalog stays the same, so its two counts are
cached per (catalog, profile). Texts are recorded only while the worker runs: only the HTTP
service starts it (`app_http`), since only it has a `/metrics` and a `/health` to show them; a
stdio gateway never loads a vocabulary.

Found vs direct, and searches without a call (sessions are bookkept inline: a few set operations):
- a search is a `toolfunnel_list_tools` of tools (with or without `query`, `filter`, `category`);
  the tools it listed count as listed in that session from then on;
- a call of a tool (top-level, or through `toolfunnel_run_tool`) is *found* if a search in the same
  session listed it before, else *direct*;
- a search is *without a call* when no tool it listed is called before the session's next search,
  or before the session ends (or is evicted: past `MAX_SESSIONS`, the oldest goes).
Modern-era requests carry no session: each profile's are kept as one session, named "".
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import structlog
import trio

from tfunnel.observe.tokens import Counter

log = structlog.get_logger("tfunnel.telemetry")

# Texts waiting to be counted; past this they are dropped (and counted as dropped).
QUEUE_SIZE = 256
MAX_SESSIONS = 256
# Profiles come from config; the cap is a backstop for the metrics' label budget.
MAX_PROFILES = 64
OTHER_PROFILE = "other"
# The names one session remembers as listed (a search lists at most a few dozen).
MAX_LISTED = 2048

Part = Literal["tools_list", "instructions", "meta_results"]
PARTS: tuple[Part, ...] = ("tools_list", "instructions", "meta_results")
Text = Callable[[], str]


@dataclass
class Figures:
    """Tokens given by part, their full-surface equivalent, and how tools were found (kept
    mutable: a call adds to them on the request path, which must stay cheap; `statistics` hands
    out copies)."""

    given: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PARTS, 0))
    full: int = 0
    lists: int = 0
    found: int = 0
    direct: int = 0
    searches: int = 0
    searches_without_call: int = 0

    def copy(self) -> Figures:
        return replace(self, given=dict(self.given))

    @property
    def given_total(self) -> int:
        return sum(self.given.values())

    def to_json(self) -> dict[str, Any]:
        return {"given": {**self.given, "total": self.given_total}, "fullEquivalent": self.full,
                "toolsLists": self.lists, "calls": {"found": self.found, "direct": self.direct},
                "searches": {"total": self.searches, "withoutCall": self.searches_without_call}}


@dataclass(frozen=True)
class Statistics:
    """A snapshot for /health and /metrics: the counter in use, texts dropped, each profile's
    figures and its current lean and full `tools/list` sizes (None until one was counted)."""

    counter: str
    fallback: str | None
    dropped: int
    profiles: dict[str, Figures]
    surfaces: dict[str, tuple[int, int]]
    sessions: int


class _Session:
    def __init__(self, profile: str) -> None:
        self.profile = profile
        self.figures = Figures()
        self.listed: set[str] = set()
        # The last search's tools while none of them was called (None: no search open).
        self.pending: frozenset[str] | None = None


class Telemetry:
    def __init__(self, counter: Counter, *, queue_size: int = QUEUE_SIZE,
                 max_sessions: int = MAX_SESSIONS) -> None:
        self.counter = counter
        self._send, self._receive = trio.open_memory_channel[tuple[Any, ...]](queue_size)
        self._max_sessions = max_sessions
        self._sessions: OrderedDict[tuple[str, str], _Session] = OrderedDict()
        self._profiles: dict[str, Figures] = {}
        self._surfaces: dict[str, tuple[Hashable, int, int]] = {}
        self.dropped = 0
        # Recorded and not yet counted; `counted` waits for none.
        self._outstanding = 0
        self._idle = trio.Event()
        self._idle.set()
        self._running = False

    # --- recording: called on the request path; never blocks, never counts --------------------

    def record_list(self, profile: str, session: str, catalog: Hashable, lean: Text, full: Text) -> None:
        """A `tools/list` answered: `lean` and `full` build the two texts (in the worker)."""
        if self._running:  # else nobody would count it, nor show it
            self._put(("list", self._profile(profile), session, catalog, lean, full))

    def record_text(self, profile: str, session: str, part: Part, text: Text) -> None:
        """Instructions or a meta-tool's result given (`text` builds it, in the worker)."""
        if self._running:
            self._put(("text", self._profile(profile), session, part, text))

    def searched(self, profile: str, session: str, listed: Iterable[str]) -> None:
        """A search (toolfunnel_list_tools of tools) listed `listed`."""
        state = self._session(self._profile(profile), session)
        self._settle(state)
        names = frozenset(listed)
        state.pending = names
        if len(state.listed) < MAX_LISTED:
            state.listed |= names
        self._add(state, "searches")

    def called(self, profile: str, session: str, name: str) -> None:
        """A tool was called by `name` (its surfaced name or register id)."""
        state = self._session(self._profile(profile), session)
        if state.pending is not None and name in state.pending:
            state.pending = None
        if name in state.listed:
            self._add(state, "found")
        else:
            self._add(state, "direct")

    def ended(self, session: str) -> None:
        """The session ended: its last search, if nothing it listed was called, was without a call."""
        for key in [k for k in self._sessions if k[1] == session]:
            self._settle(self._sessions.pop(key))

    # --- reading ------------------------------------------------------------------------------

    def session(self, profile: str, session: str) -> Figures | None:
        state = self._sessions.get((profile, session))
        return state.figures.copy() if state is not None else None

    def statistics(self) -> Statistics:
        return Statistics(self.counter.name, self.counter.fallback, self.dropped,
                          {p: f.copy() for p, f in self._profiles.items()},
                          {p: (lean, full) for p, (_, lean, full) in self._surfaces.items()},
                          len(self._sessions))

    # --- the worker -----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Count what was recorded, one text at a time, in a thread. Runs until cancelled."""
        self._running = True
        task_status.started()
        try:
            await self._serve()
        finally:
            self._running = False

    async def _serve(self) -> None:
        async for item in self._receive:
            try:
                await self._count(item)
            except Exception:  # a text that cannot be built or counted: telemetry never stops serving
                log.exception("token count failed")
            finally:
                self._outstanding -= 1
                if not self._outstanding:
                    self._idle.set()

    async def counted(self) -> None:
        """Wait until everything recorded so far is counted (while the worker runs)."""
        await self._idle.wait()

    async def _count(self, item: tuple[Any, ...]) -> None:
        if item[0] == "list":
            _, profile, session, catalog, lean, full = item
            cached = self._surfaces.get(profile)
            if cached is None or cached[0] is not catalog:
                counts = await trio.to_thread.run_sync(self._count_both, lean, full)
                cached = self._surfaces[profile] = (catalog, *counts)
            self._given(profile, session, "tools_list", cached[1], full=cached[2], lists=1)
            return
        _, profile, session, part, text = item
        tokens = await trio.to_thread.run_sync(lambda: self.counter.count(text()))
        self._given(profile, session, part, tokens, full=tokens if part == "instructions" else 0)

    def _count_both(self, lean: Text, full: Text) -> tuple[int, int]:
        return self.counter.count(lean()), self.counter.count(full())

    def _given(self, profile: str, session: str, part: str, tokens: int, *, full: int,
               lists: int = 0) -> None:
        for figures in (self._session(profile, session).figures, self._profiles[profile]):
            figures.given[part] += tokens
            figures.full += full
            figures.lists += lists

    # --- bookkeeping ----------------------------------------------------------------------------

    def _put(self, item: tuple[Any, ...]) -> None:
        try:
            self._send.send_nowait(item)
        except trio.WouldBlock:
            self.dropped += 1
            return
        self._outstanding += 1
        if self._idle.is_set():
            self._idle = trio.Event()

    def _profile(self, profile: str) -> str:
        if profile not in self._profiles:
            if len(self._profiles) >= MAX_PROFILES:
                profile = OTHER_PROFILE
            self._profiles.setdefault(profile, Figures())
        return profile

    def _session(self, profile: str, session: str) -> _Session:
        key = (profile, session)
        state = self._sessions.get(key)
        if state is None:
            state = self._sessions[key] = _Session(profile)
            while len(self._sessions) > self._max_sessions:
                self._settle(self._sessions.popitem(last=False)[1])
        return state

    def _settle(self, state: _Session) -> None:
        """The session's last search ends here: without a call if none of its tools was called."""
        if state.pending is not None:
            state.pending = None
            self._add(state, "searches_without_call")

    def _add(self, state: _Session, name: str) -> None:
        for figures in (state.figures, self._profiles[state.profile]):
            setattr(figures, name, getattr(figures, name) + 1)
