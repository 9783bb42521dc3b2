"""One supervised upstream: its states, its incarnations, its lists, its calls.

Each incarnation runs on a connection of its own: the transport factory (`upstream/factory.py`)
makes a transport, whose `connect()` context holds the connection: every path out of it (end of
stream, failed handshake, cancel) closes the connection first (for a child: the stop sequence,
shielded), so no child outlives its incarnation and a new one never starts before the old process
group is gone. It knows nothing of processes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import structlog
import trio

from tfunnel._fastpath import acquire_eager
from tfunnel.config.expose import UpstreamSpec
from tfunnel.errors import UpstreamCrashed, UpstreamError, UpstreamUnavailable
from tfunnel.protocol.eras import Era
from tfunnel.protocol.jsonrpc import Notification
from tfunnel.upstream import handshake, lifecycle
from tfunnel.upstream.backoff import RestartBudget
from tfunnel.upstream.call import CallChannel, UpstreamCall
from tfunnel.upstream.coalesce import Coalescer
from tfunnel.upstream.factory import transport_for
from tfunnel.upstream.handshake import Connection
from tfunnel.upstream.listing import (
    EXTRAS,
    PROMPTS,
    RESOURCES,
    TEMPLATES,
    TOOLS,
    Items,
    Kind,
    changed_kinds,
    declared,
    list_all,
)
from tfunnel.upstream.session import UpstreamSession
from tfunnel.upstream.states import COMING, Context, Identity, Mirror, State, UpstreamStatistics, now_iso
from tfunnel.upstream.transport import MessageStream, SpawnFailed, TransportFactory

log = structlog.get_logger("tfunnel.upstream")

# How long a wrapped upstream's first handshake waits for the stdio client it presents.
CLIENT_DUE_S = 2.0
# Calls in flight to one upstream at once; more wait their turn instead of piling onto its stdin.
MAX_CONCURRENT_CALLS = 64
# Requests other than tools/call that an upstream answers for a client, and whether each is a
# payload call (`timeoutMs`, re-armed by progress) rather than a control call.
FORWARDED = {"prompts/get": True, "resources/read": True, "completion/complete": False,
             "resources/subscribe": False, "resources/unsubscribe": False, "logging/setLevel": False}


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
        # What the ready incarnation lists, by kind (tools, prompts, resources, templates).
        self.listed: dict[str, Items] = {}
        # The last successful handshake: its era is reused by the next incarnation (no probe)
        # until a handshake fails.
        self.connection: Connection | None = None
        self.pid: int | None = None
        self.last_error: str | None = None
        self.stopped_reason: str | None = None
        self.first_attempt = trio.Event()
        self.ever_ready = False
        # For the lifecycle records: restart attempts since last ready, whether the upstream ended
        # the current connection itself, whether a config change is replacing it.
        self._attempt = 0
        self._died = False
        self.halting = False
        self._changed = trio.Event()  # set (and replaced) on every state change
        # Upstream list_changed notifications, however many, re-list once at a time (per kind).
        self._relists = {kind.name: Coalescer(partial(self._relist, kind))
                         for kind in (TOOLS, PROMPTS, RESOURCES, TEMPLATES)}
        # What clients asked of this upstream (kept across incarnations, replayed on each): the
        # resource URIs (its own) to report updates of, and the lowest log level (legacy).
        self.wanted_uris: frozenset[str] = frozenset()
        self.log_level: str | None = None
        self._notices = Coalescer(self._sync_notices)
        self._nursery: trio.Nursery | None = None  # the current incarnation's
        self._synced_uris: frozenset[str] = frozenset()
        self._synced_level: str | None = None
        self._listening: dict[str, Any] = {}  # a modern upstream's open listen: its notifications
        self._listen_scope: trio.CancelScope | None = None
        # A stdio wrap's client, presented as us (None: the gateway's own identity); and the
        # identity the current (or last) handshake presented.
        self.mirror: Mirror | None = None
        self.presented: Identity | None = None
        # Set once the client a stdio wrap presents is known (`Supervisor.expect_client`).
        self.client_due: trio.Event | None = None

    @property
    def tools(self) -> Items:
        return self.listed.get(TOOLS.name, ())

    @property
    def capabilities(self) -> Mapping[str, Any]:
        """What the upstream declared in its handshake (empty before one)."""
        return self.connection.capabilities if self.connection is not None else {}

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
            old, self.state = self.state, state
            self.since = now_iso()
            self.ever_ready |= state is State.READY
            self._attempt += old is State.BACKOFF and state is State.STARTING
            facts = lifecycle.Facts(self.statistics(), lifecycle.where(self.spec), self._attempt,
                                    died=self._died, halting=self.halting)
            for record in lifecycle.records(old, state, facts):
                self._ctx.on_event(record)
            if state is State.READY:
                self._attempt = 0
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
        self._died = False
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
                    self.listed = {}
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
                                  on_notification=lambda note: self._notification(note, incarnation),
                                  fallback=self.mirror.requests if self.mirror is not None else None)
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
                self._notices.request(nursery)  # replay what clients asked of the last incarnation
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
        self._died = True  # not cancelled: the upstream ended it
        session.fail_all(UpstreamCrashed(self.last_error))
        ended.set()

    async def _handshake(self, session: UpstreamSession, nursery: trio.Nursery) -> None:
        due = self.client_due
        if self.mirror is None and due is not None and not due.is_set():
            with trio.move_on_after(CLIENT_DUE_S):  # the client a stdio wrap presents, about to arrive
                await due.wait()
        identity = self.mirror.identity if self.mirror is not None else self._ctx.identity
        self.presented = identity
        connection = await handshake.connect(session, self.spec, identity.client_info(), self.connection,
                                             identity.capabilities)
        self._nursery = nursery
        self._synced_uris, self._synced_level = frozenset(), None
        self._listening, self._listen_scope = {}, None
        if connection.era is Era.MODERN:
            # Before listing, so no change between the list and the subscription goes unseen.
            await self._listen(session, nursery, connection)
        listed = {TOOLS.name: await list_all(session, TOOLS, self._control_s)}
        for kind in EXTRAS:
            if declared(kind, connection.capabilities):
                listed[kind.name] = await self._list_extra(session, kind)
        self.listed = listed
        self.connection = connection

    @property
    def _control_s(self) -> float:
        return self.spec.request_timeout_ms / 1000

    async def _list_extra(self, session: UpstreamSession, kind: Kind) -> Items:
        """Prompts, resources or templates: a failure lists none (the tools still serve)."""
        try:
            return await list_all(session, kind, self._control_s)
        except UpstreamError as exc:
            log.warning("listing failed; none listed", upstream=self.spec.id, kind=kind.name,
                        error=str(exc))
            return ()

    def _notification(self, note: Notification, nursery: list[trio.Nursery]) -> None:
        # Coalesced: a burst of list_changed means one re-list in flight plus one pending, never
        # one task each; the re-list runs in the incarnation's nursery and ends with it.
        kinds = changed_kinds(note.method)
        if kinds:
            for kind in kinds:
                if nursery and (kind is TOOLS or declared(kind, self.capabilities)):
                    self._relists[kind.name].request(nursery[0])
            return
        self._ctx.on_notification(self.spec.id, note)

    async def _relist(self, kind: Kind) -> None:
        session = self.session
        if session is None:
            return
        try:
            items = await list_all(session, kind, self._control_s)
        except UpstreamError as exc:
            log.warning("re-listing failed", upstream=self.spec.id, kind=kind.name, error=str(exc))
            return
        if session is not self.session:
            return  # the incarnation ended meanwhile
        if items == self.listed.get(kind.name, ()):
            # Nothing changed here, yet the upstream said so: told as it came (a wrapped upstream's
            # announcement reaches clients as is; a real change reaches them with the new surface).
            self._ctx.on_notification(self.spec.id, Notification(kind.changed, {}))
            return
        self.listed = {**self.listed, kind.name: items}
        log.info("upstream list changed", upstream=self.spec.id, kind=kind.name, items=len(items))
        self._ctx.on_change()

    # --- what clients asked: resource updates, log messages ---------------------------------------

    def set_subscriptions(self, uris: frozenset[str]) -> None:
        self.wanted_uris = uris
        self._resync()

    def set_log_level(self, level: str | None) -> None:
        self.log_level = level
        self._resync()

    def _resync(self) -> None:
        if self.session is not None and self._nursery is not None:
            self._notices.request(self._nursery)

    def _subscribable(self, connection: Connection) -> bool:
        resources = connection.capabilities.get("resources")
        return isinstance(resources, Mapping) and resources.get("subscribe") is True

    async def _listen(self, session: UpstreamSession, nursery: trio.Nursery, connection: Connection) -> None:
        """(Re)open a modern upstream's listen stream when what it should carry changed."""
        flags: dict[str, Any] = connection.listen_flags()
        if self.wanted_uris and self._subscribable(connection):
            flags["resourceSubscriptions"] = sorted(self.wanted_uris)
        if flags == self._listening:
            return
        if self._listen_scope is not None:
            self._listen_scope.cancel()
        self._listening = flags
        self._listen_scope = await nursery.start(self._hold_listen, session, flags) if flags else None

    async def _hold_listen(self, session: UpstreamSession, flags: dict[str, Any], *,
                           task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            await handshake.listen(session, self.spec.id, flags)

    async def _sync_notices(self) -> None:
        """Bring the upstream in line with `wanted_uris` and `log_level` (one run at a time)."""
        session, connection, nursery = self.session, self.connection, self._nursery
        if session is None or connection is None or nursery is None:
            return
        if connection.era is Era.MODERN:  # subscriptions ride the listen stream; logs, each request
            await self._listen(session, nursery, connection)
            return
        try:
            # The level first: an upstream may log what it does with the subscriptions.
            level = self.log_level
            if level is not None and level != self._synced_level \
                    and isinstance(connection.capabilities.get("logging"), Mapping):
                await session.request("logging/setLevel", {"level": level}, timeout_s=self._control_s)
                self._synced_level = level
            if self._subscribable(connection):
                for uri in sorted(self.wanted_uris - self._synced_uris):
                    await session.request("resources/subscribe", {"uri": uri}, timeout_s=self._control_s)
                    self._synced_uris |= {uri}
                for uri in sorted(self._synced_uris - self.wanted_uris):
                    self._synced_uris -= {uri}
                    await session.request("resources/unsubscribe", {"uri": uri}, timeout_s=self._control_s)
            elif self.wanted_uris:
                log.warning("upstream does not support resource subscriptions", upstream=self.spec.id)
        except UpstreamError as exc:
            log.warning("could not pass on what clients asked for", upstream=self.spec.id, error=str(exc))

    async def request(self, method: str, params: dict[str, Any], *, log_level: str | None = None,
                      on_progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """Forward one of the `FORWARDED` requests (or, under a wrap, any) and return the
        upstream's raw result; raise `UpstreamError` when it cannot answer (`UpstreamRemoteError`
        for its error answer).
        `on_progress` gets a payload call's progress."""
        session = self.session
        if session is None or self.state is not State.READY:
            raise UpstreamUnavailable(self.unavailable() or f"upstream {self.spec.id!r} is not connected")
        payload = FORWARDED.get(method, True)  # a wrapped upstream's own method: a payload call
        timeout_s = self.spec.timeout_ms / 1000 if payload else self._control_s
        await acquire_eager(self._limiter)
        try:
            return await session.request(method, params, timeout_s=timeout_s, payload=payload,
                                         log_level=log_level if session.modern_version else None,
                                         on_progress=on_progress if payload else None)
        finally:
            self._limiter.release()

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
