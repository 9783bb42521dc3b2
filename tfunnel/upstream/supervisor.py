"""The supervisor: one task per upstream, each incarnation on a connection of its own.

States: starting → ready → (backoff → starting)* → stopped; plus disabled. Each upstream's task
runs under its own cancel scope, so a config change restarts exactly the upstreams whose
definition changed, and shutdown cancels them all. For each incarnation the transport factory
(`upstream/factory.py`) makes a transport, whose `connect()` context holds the connection: every
path out of it (end of stream, failed handshake, cancel) closes the connection first (for a
child: the stop sequence, shielded), so no child outlives its incarnation and a new one never
starts before the old process group is gone. The supervisor knows nothing of processes.
"""

from __future__ import annotations

from typing import Any

import structlog
import trio

from tfunnel._fastpath import acquire_eager
from tfunnel.config.expose import ExposeConfig, ExposeEntry, UpstreamSpec
from tfunnel.config.names import owners
from tfunnel.errors import UpstreamCrashed, UpstreamError, UpstreamUnavailable
from tfunnel.protocol.eras import Era
from tfunnel.protocol.jsonrpc import Notification
from tfunnel.upstream import handshake
from tfunnel.upstream.backoff import RestartBudget
from tfunnel.upstream.call import CallChannel, UpstreamCall
from tfunnel.upstream.coalesce import Coalescer
from tfunnel.upstream.factory import transport_for
from tfunnel.upstream.handshake import Connection
from tfunnel.upstream.session import UpstreamSession
from tfunnel.upstream.states import COMING, Context, Identity, State, UpstreamStatistics, now_iso
from tfunnel.upstream.transport import MessageStream, SpawnFailed, TransportFactory

__all__ = ["Context", "Identity", "State", "Supervisor", "Upstream", "UpstreamStatistics"]

log = structlog.get_logger("tfunnel.upstream")

# Calls in flight to one upstream at once; more wait their turn instead of piling onto its stdin.
MAX_CONCURRENT_CALLS = 64
# tools/list pages followed before we stop trusting nextCursor.
MAX_TOOL_PAGES = 50


class Upstream:
    """One supervised upstream: its state, its live session, its tools."""

    def __init__(self, spec: UpstreamSpec, ctx: Context,
                 transports: TransportFactory = transport_for) -> None:
        self.spec = spec
        self._ctx = ctx
        self._transports = transports
        self._budget = RestartBudget(spec.restart)
        self._limiter = trio.CapacityLimiter(MAX_CONCURRENT_CALLS)
        self.state = State.STARTING if spec.enabled else State.DISABLED
        self.since = now_iso()
        self.session: UpstreamSession | None = None
        self.tools: tuple[dict[str, Any], ...] = ()
        # The last successful handshake: its era is reused by the next incarnation (no probe)
        # until a handshake fails.
        self.connection: Connection | None = None
        self.pid: int | None = None
        self.last_error: str | None = None
        self.stopped_reason: str | None = None
        self.first_attempt = trio.Event()
        self.ever_ready = False
        self._changed = trio.Event()  # set (and replaced) on every state change
        # Upstream list_changed notifications, however many, re-list once at a time.
        self._relists = Coalescer(self._relist)

    @property
    def era(self) -> Era | None:
        """The negotiated era (None before the first handshake, or after one failed)."""
        return self.connection.era if self.connection is not None else None

    @property
    def protocol_version(self) -> str | None:
        return self.connection.protocol_version if self.connection is not None else None

    def statistics(self) -> UpstreamStatistics:
        era = self.era
        return UpstreamStatistics(
            id=self.spec.id, state=self.state.value, transport=self.spec.transport,
            era=era.value if era is not None else None, protocol_version=self.protocol_version,
            pid=self.pid, tools=len(self.tools), restarts=self._budget.total, since=self.since,
            last_error=self.last_error, stopped_reason=self.stopped_reason)

    def _set(self, state: State) -> None:
        if state is not self.state:
            self.state = state
            self.since = now_iso()
            self.ever_ready |= state is State.READY
            self._changed.set()
            self._changed = trio.Event()

    async def wait_ready(self, deadline: float) -> str | None:
        """Wait (until the trio time `deadline`) while this upstream is starting or restarting;
        None once it is ready, else why it is not, naming it (never its stderr)."""
        with trio.move_on_at(deadline):
            while self.state in COMING:
                await self._changed.wait()
        return self.unavailable()

    def unavailable(self) -> str | None:
        """Why a call cannot reach this upstream now, or None when it is ready."""
        name = self.spec.id
        if self.state is State.READY:
            return None
        if self.state in COMING:
            what = "restarting" if self.ever_ready else "still starting"
            detail = f" (last error: {self.last_error})" if self.last_error else ""
            return f"upstream {name!r} is {what}{detail}"
        if self.state is State.STOPPED:
            return f"upstream {name!r} is stopped ({self.stopped_reason})"
        return f"upstream {name!r} is {self.state.value}"

    async def run(self) -> None:
        """Supervise until cancelled, or until a ceiling stops the upstream."""
        while True:
            self._set(State.STARTING)
            permanent = False
            try:
                await self._incarnation()
                error = self.last_error or f"upstream {self.spec.id!r} exited"
            except SpawnFailed as exc:
                error, permanent = str(exc), exc.permanent
                if exc.final:  # only a config change heals it: no retry, no restart counted
                    self.last_error = self.stopped_reason = error
                    self._set(State.STOPPED)
                    self.first_attempt.set()
                    log.error("upstream stopped", upstream=self.spec.id, reason=error)
                    return
            except UpstreamError as exc:
                error = str(exc)
            self.last_error = error
            self.first_attempt.set()
            verdict = self._budget.failed(trio.current_time(), permanent=permanent, jitter=self._ctx.jitter())
            if verdict.delay_s is None:
                self.stopped_reason = f"{verdict.reason}; last error: {error}"
                self._set(State.STOPPED)
                log.error("upstream stopped", upstream=self.spec.id, reason=self.stopped_reason)
                return
            log.warning("upstream down; restarting", upstream=self.spec.id, error=error,
                        backoff_s=round(verdict.delay_s, 3))
            self._set(State.BACKOFF)
            await trio.sleep(verdict.delay_s)

    async def _incarnation(self) -> None:
        """One connection: made, handshaken, watched until it ends; always closed. Raises
        `SpawnFailed` when it could not be made, `UpstreamError` when the handshake failed; returns
        when the connection ended after it was ready (`last_error` says how)."""
        spec = self.spec
        transport = self._transports(spec, self._ctx)
        failure: UpstreamError | None = None
        stream: MessageStream | None = None
        had_tools = False
        try:
            async with transport.connect() as stream:
                self.pid = stream.pid
                log.info("upstream starting", upstream=spec.id, pid=stream.pid, peer=stream.peer)
                try:
                    # Raised after the connection is closed, not out of it (a transport may run
                    # tasks of its own, whose nursery would wrap it in a group).
                    failure = await self._session(stream)
                finally:
                    had_tools = self.session is not None
                    self.session = None
                    self.tools = ()
                    if self.state is State.READY:
                        # No longer ready from this moment (not only once the connection is
                        # closed): a call arriving while it stops waits for the next incarnation
                        # instead of finding a ready upstream without a session.
                        self._set(State.BACKOFF)
        finally:
            self.pid = None
            tail = stream.stderr_tail() if stream is not None else ""
            if tail:
                log.info("upstream stderr (tail)", upstream=spec.id, tail=tail[-500:])
            if had_tools:
                self._ctx.on_change()
        if failure is not None:
            raise failure

    async def _session(self, stream: MessageStream) -> UpstreamError | None:
        """Run the session on `stream` until it ends; the handshake's failure, if it failed."""
        spec = self.spec
        incarnation: list[trio.Nursery] = []  # the incarnation's nursery, once it exists
        session = UpstreamSession(spec.id, stream,
                                  on_notification=lambda note: self._notification(note, incarnation))
        failure: UpstreamError | None = None
        async with trio.open_nursery() as nursery:
            incarnation.append(nursery)
            ended = trio.Event()
            nursery.start_soon(self._watch, stream, session, ended)
            try:
                await self._handshake(session, nursery)
            except UpstreamError as exc:
                failure = exc
                self.connection = None  # the next incarnation probes again
                nursery.cancel_scope.cancel()
            else:
                self.session = session
                self._set(State.READY)
                self._budget.connected()
                self.first_attempt.set()
                log.info("upstream ready", upstream=spec.id, pid=stream.pid, peer=stream.peer,
                         tools=len(self.tools), era=self.statistics().era, protocol=self.protocol_version)
                self._ctx.on_change()
                await ended.wait()
                nursery.cancel_scope.cancel()
        return failure

    async def _watch(self, stream: MessageStream, session: UpstreamSession, ended: trio.Event) -> None:
        """Read until the stream ends or the upstream is gone, whichever comes first (the reader
        may be stuck answering a dead upstream whose input nobody reads); learn why, and fail
        everything in flight at once."""
        async with trio.open_nursery() as watch:
            async def read() -> None:
                await session.run()
                watch.cancel_scope.cancel()

            watch.start_soon(read)
            await stream.wait_ended()
            watch.cancel_scope.cancel()
        self.last_error = f"upstream {self.spec.id!r} {await stream.wait_closed()}"
        session.fail_all(UpstreamCrashed(self.last_error))
        ended.set()

    async def _handshake(self, session: UpstreamSession, nursery: trio.Nursery) -> None:
        identity = self._ctx.identity
        connection = await handshake.connect(
            session, self.spec, {"name": identity.name, "version": identity.version}, self.connection)
        if connection.lists_changes():
            # Before listing, so no change between the list and the subscription goes unseen.
            nursery.start_soon(handshake.listen, session, self.spec.id)
        self.tools = await self._list_tools(session)
        self.connection = connection

    async def _list_tools(self, session: UpstreamSession) -> tuple[dict[str, Any], ...]:
        control = self.spec.request_timeout_ms / 1000
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            params = {"cursor": cursor} if cursor else {}
            page = await session.request("tools/list", params, timeout_s=control)
            tools += [t for t in page.get("tools", [])
                      if isinstance(t, dict) and isinstance(t.get("name"), str)]
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                break
        return tuple(tools)

    def _notification(self, note: Notification, nursery: list[trio.Nursery]) -> None:
        # Coalesced: a burst of list_changed means one re-list in flight plus one pending, never
        # one task each; the re-list runs in the incarnation's nursery and ends with it.
        if note.method == "notifications/tools/list_changed" and nursery:
            self._relists.request(nursery[0])

    async def _relist(self) -> None:
        session = self.session
        if session is None:
            return
        try:
            tools = await self._list_tools(session)
        except UpstreamError as exc:
            log.warning("re-listing tools failed", upstream=self.spec.id, error=str(exc))
            return
        if session is not self.session or tools == self.tools:
            return  # the incarnation ended meanwhile, or nothing changed: nothing to tell anyone
        self.tools = tools
        log.info("upstream tools changed", upstream=self.spec.id, tools=len(self.tools))
        self._ctx.on_change()

    async def call_tool(self, call: UpstreamCall, channel: CallChannel | None = None) -> dict[str, Any]:
        """Forward `tools/call` and return the upstream's raw result (a modern `input_required`
        result included: the caller bridges it); raise `UpstreamError` when it cannot answer.
        `channel` relays progress and answers the upstream's own requests during the call
        (without one, progress is dropped and those requests get the declined defaults)."""
        session = self.session
        if session is None or self.state is not State.READY:
            raise UpstreamUnavailable(self.unavailable() or f"upstream {self.spec.id!r} is not connected")
        modern = session.modern_version is not None
        await acquire_eager(self._limiter)
        try:
            return await session.request(
                "tools/call", call.params(modern=modern), timeout_s=self.spec.timeout_ms / 1000,
                payload=True, on_progress=channel.progress if channel is not None else None,
                on_request=channel.request if channel is not None and channel.answers else None,
                capabilities=call.capabilities, log_level=call.log_level if modern else None)
        finally:
            self._limiter.release()

class Supervisor:
    """All upstreams of one gateway, reconfigured live from `mcp/expose.json`."""

    def __init__(self, ctx: Context, *, startup_deadline_s: float | None = None,
                 transports: TransportFactory = transport_for) -> None:
        self._ctx = ctx
        self._transports = transports
        # The gateway's startup wait ends when every upstream connected or failed its first
        # attempt, or after this; a call to a tool of a starting upstream waits as long.
        self._startup_deadline_s = ctx.limits.upstream_start_s if startup_deadline_s is None \
            else startup_deadline_s
        self.upstreams: dict[str, Upstream] = {}
        self._expose: tuple[ExposeEntry, ...] = ()
        self._scopes: dict[str, trio.CancelScope] = {}
        self._finished: dict[str, trio.Event] = {}
        self._lock = trio.Lock()
        self._nursery: trio.Nursery | None = None

    async def run(self, config: ExposeConfig, *,
                  task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start every enabled upstream concurrently; report started once each connected or failed
        its first attempt (or the startup deadline passed); supervise until cancelled."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.serve, config)
            await self.first_attempts()
            task_status.started()

    async def serve(self, config: ExposeConfig, *,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start every enabled upstream concurrently; report started as soon as each is known (so
        a call may wait for the one it needs); supervise until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._expose = config.expose
            async with self._lock:
                for spec in config.upstreams:
                    await self._start(spec)
            task_status.started()
            await trio.sleep_forever()

    async def first_attempts(self) -> None:
        """Wait until every enabled upstream connected or failed its first attempt, at most the
        startup deadline."""
        with trio.move_on_after(self._startup_deadline_s):
            for upstream in list(self.upstreams.values()):
                if upstream.state is not State.DISABLED:
                    await upstream.first_attempt.wait()

    def reconfigure(self, config: ExposeConfig) -> None:
        """Apply a new config in the background: only changed upstreams restart."""
        assert self._nursery is not None
        self._nursery.start_soon(self._apply, config)

    async def _apply(self, config: ExposeConfig) -> None:
        async with self._lock:
            self._expose = config.expose
            wanted = {spec.id: spec for spec in config.upstreams}
            for upstream_id in list(self.upstreams):
                old = self.upstreams[upstream_id].spec
                new = wanted.get(upstream_id)
                if new is not None and new.enabled == old.enabled and new.definition() == old.definition():
                    self.upstreams[upstream_id].spec = new  # a note changed; the child keeps running
                    continue
                await self._halt(upstream_id)
                log.info("upstream removed" if new is None else "upstream definition changed",
                         upstream=upstream_id)
            order = list(wanted)
            for spec in config.upstreams:
                if spec.id not in self.upstreams:
                    await self._start(spec)
            self.upstreams = {uid: self.upstreams[uid] for uid in order}
            self._ctx.on_change()

    async def _start(self, spec: UpstreamSpec) -> None:
        upstream = Upstream(spec, self._ctx, self._transports)
        self.upstreams[spec.id] = upstream
        if not spec.enabled:
            return
        assert self._nursery is not None
        finished = trio.Event()
        self._finished[spec.id] = finished
        self._scopes[spec.id] = await self._nursery.start(self._supervise, upstream, finished)

    @staticmethod
    async def _supervise(upstream: Upstream, finished: trio.Event, *,
                         task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        try:
            with trio.CancelScope() as scope:
                task_status.started(scope)
                await upstream.run()
        finally:
            finished.set()

    async def _halt(self, upstream_id: str) -> None:
        """Cancel one upstream's task and wait until its child is reaped."""
        scope = self._scopes.pop(upstream_id, None)
        finished = self._finished.pop(upstream_id, None)
        if scope is not None and finished is not None:
            scope.cancel()
            await finished.wait()
        gone = self.upstreams.pop(upstream_id)
        # Calls waiting for it wake up and look again (for its successor, if there is one).
        gone.stopped_reason = f"upstream {upstream_id!r} was changed or removed in mcp/expose.json"
        gone._set(State.STOPPED)

    def hurry(self) -> None:
        """The gateway is stopping by a signal: stop children without the usual graces."""
        self._ctx.urgent.set()

    def statistics(self) -> list[UpstreamStatistics]:
        return [u.statistics() for u in self.upstreams.values()]

    def unready_owner(self, name: str) -> str | None:
        """The id of an upstream that is not ready (starting, restarting, stopped or disabled) and
        would surface a tool as `name` once up: the upstream of an expose entry naming it, else
        the one whose `<id>_` prefix it carries (the longest such id)."""
        unready = [uid for uid, u in self.upstreams.items() if u.state is not State.READY]
        candidates = owners(name, unready, self._expose)
        return candidates[0] if candidates else None

    async def wait_ready(self, upstream_id: str) -> str | None:
        """Wait, bounded by the start window, while `upstream_id` is starting or restarting (also
        across a reconfiguration that replaces it); None once it is ready, else why it is not."""
        deadline = trio.current_time() + self._startup_deadline_s
        while True:
            upstream = self.upstreams.get(upstream_id)
            if upstream is None:
                return f"upstream {upstream_id!r} is not configured"
            problem = await upstream.wait_ready(deadline)
            if problem is None or self.upstreams.get(upstream_id) is upstream \
                    or trio.current_time() >= deadline:
                return problem

    def ready_tools(self) -> dict[str, tuple[dict[str, Any], ...]]:
        """The tools of every ready upstream, in config order."""
        return {uid: u.tools for uid, u in self.upstreams.items() if u.state is State.READY}

    async def call_tool(self, call: UpstreamCall, channel: CallChannel | None = None) -> dict[str, Any]:
        """`Upstream.call_tool` on the upstream `call.upstream`."""
        upstream = self.upstreams.get(call.upstream)
        if upstream is None:
            raise UpstreamUnavailable(f"upstream {call.upstream!r} is not configured")
        return await upstream.call_tool(call, channel)
