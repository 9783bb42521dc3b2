"""The supervisor: one task per upstream, each incarnation on a connection of its own.

States: starting → ready → (backoff → starting)* → stopped; plus disabled. Each upstream's task
(`upstream/supervised.py`) runs under its own cancel scope, so a config change restarts exactly
the upstreams whose definition changed, and shutdown cancels them all. The supervisor knows
nothing of processes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import structlog
import trio

from tfunnel.config.expose import ExposeConfig, ExposeEntry, UpstreamSpec
from tfunnel.config.names import owners
from tfunnel.errors import UpstreamUnavailable
from tfunnel.upstream import lifecycle
from tfunnel.upstream.call import CallChannel, UpstreamCall
from tfunnel.upstream.factory import transport_for
from tfunnel.upstream.isolation import isolation_problems
from tfunnel.upstream.listing import Items
from tfunnel.upstream.states import Context, Identity, Mirror, State, UpstreamStatistics
from tfunnel.upstream.supervised import Upstream
from tfunnel.upstream.transport import TransportFactory
from tfunnel.upstream.twins import Twins

__all__ = ["Context", "Identity", "Mirror", "State", "Supervisor", "Upstream", "UpstreamStatistics"]

log = structlog.get_logger("tfunnel.upstream")


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
        # What clients asked of each upstream (`surface.notices`), for the upstreams of later configs too.
        self._wanted: dict[str, frozenset[str]] = {}
        self._log_level: str | None = None
        # The client each upstream presents as us (a stdio wrap's), for its later incarnations too.
        self._mirrors: dict[str, Mirror] = {}
        # Upstreams whose first handshake waits (bounded) for the client a stdio wrap presents.
        self._client_due: dict[str, trio.Event] = {}
        # Legacy-era connections of a wrapped dual-era upstream, for its legacy clients.
        self.twins = Twins(ctx, transports, self._startup_deadline_s)

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
            self._nursery = self.twins.nursery = nursery
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
            started = []
            for spec in config.upstreams:
                if spec.id not in self.upstreams:
                    await self._start(spec)
                    started.append(self.upstreams[spec.id])
            self.upstreams = {uid: self.upstreams[uid] for uid in order}
            self._ctx.on_change()
        # Recorded once what it started had its first attempt (at most the start window), so
        # the record says which upstreams the reload left connected.
        with trio.move_on_after(self._startup_deadline_s):
            for upstream in started:
                if upstream.state is not State.DISABLED:
                    await upstream.first_attempt.wait()
        self._ctx.on_event(lifecycle.reload(u.statistics() for u in self.upstreams.values()))

    async def _start(self, spec: UpstreamSpec) -> None:
        upstream = Upstream(spec, self._ctx, self._transports)
        self.upstreams[spec.id] = upstream
        upstream.wanted_uris = self._wanted.get(spec.id, frozenset())
        upstream.mirror = self._mirrors.get(spec.id)
        upstream.client_due = self._client_due.get(spec.id)
        upstream.log_level = self._log_level
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
            self.upstreams[upstream_id].halting = True  # what it records: a reload, not a failure
            scope.cancel()
            await finished.wait()
        self.twins.drop(upstream_id)
        gone = self.upstreams.pop(upstream_id)
        # Calls waiting for it wake up and look again (for its successor, if there is one).
        gone.stopped_reason = f"upstream {upstream_id!r} was changed or removed in mcp/expose.json"
        gone._set(State.STOPPED)

    def expect_client(self, upstream_id: str) -> None:
        """A stdio wrap's client is about to initialize: `upstream_id`'s first handshake waits for
        it (bounded, `CLIENT_DUE_S`), so it presents that client at once instead of connecting
        again for it."""
        self._client_due.setdefault(upstream_id, trio.Event())

    def release_client(self, upstream_id: str) -> None:
        """No client to present is coming (a modern client asked first): the handshake goes on."""
        due = self._client_due.pop(upstream_id, None)
        if due is not None:
            due.set()

    async def mirror(self, upstream_id: str, mirror: Mirror | None) -> None:
        """Present `mirror` to `upstream_id` from now on, in every handshake (None: our own
        identity). An upstream whose handshake presented another identity connects again; this
        waits (bounded by the start window) until it is ready."""
        if mirror is None:
            self._mirrors.pop(upstream_id, None)
        else:
            self._mirrors[upstream_id] = mirror
        upstream = self.upstreams.get(upstream_id)
        if upstream is None or not upstream.spec.enabled:
            return
        upstream.mirror = mirror
        self.release_client(upstream_id)  # a handshake waiting for this client presents it now
        if self.twins.set_mirror(upstream_id, mirror) is not None:
            self.twins.drop(upstream_id)  # it presented another client: the next one starts afresh
        wanted = mirror.identity if mirror is not None else self._ctx.identity
        if upstream.presented is not None and upstream.presented != wanted:
            log.info("upstream connects again as the wrap's client", upstream=upstream_id,
                     client=wanted.name)
            await self._restart(upstream.spec)
        await self.first_attempt(upstream_id)

    async def first_attempt(self, upstream_id: str) -> None:
        """Wait (bounded by the start window) until `upstream_id`'s current incarnation connected or
        failed its first attempt: a client waits for an upstream starting, not one that cannot."""
        upstream = self.upstreams.get(upstream_id)
        if upstream is not None and upstream.state is not State.DISABLED:
            with trio.move_on_after(self._startup_deadline_s):
                await upstream.first_attempt.wait()

    async def legacy_twin(self, upstream_id: str) -> None:
        """A wrap's legacy client arrived: a modern-era connection to a dual-era upstream gets a
        legacy-era twin for it (`upstream.twins`), waited for (bounded)."""
        main = self.upstreams.get(upstream_id)
        if main is not None:
            await self.twins.ensure(main, self._mirrors.get(upstream_id),
                                    self._wanted.get(upstream_id, frozenset()), self._log_level)

    def rewrapped(self, before: str | None, after: str | None) -> None:
        """The wrap moved from `before` to `after` (either None: no wrap). The isolation guard
        spares the wrapped upstream alone, so each of the two whose definition the guard refuses
        starts again: `after` (refused until now), `before` (spared until now). A client that
        `before` mirrored is forgotten (its next handshake presents us)."""
        assert self._nursery is not None
        self.twins.drop(before)
        mirrored = before is not None and self._mirrors.pop(before, None) is not None
        for upstream_id in dict.fromkeys((before, after)):
            upstream = self.upstreams.get(upstream_id or "")
            if upstream is None or not upstream.spec.enabled:
                continue
            # The one it presented a client to connects again as us (that client's capabilities
            # and its fallback for the upstream's requests are the wrap's only).
            unmirror = upstream_id == before and mirrored
            if unmirror:
                upstream.mirror = None
            if unmirror or isolation_problems(upstream.spec, self._ctx.home):
                self._nursery.start_soon(self._restart, upstream.spec)

    async def _restart(self, spec: UpstreamSpec) -> None:
        async with self._lock:
            if self.upstreams.get(spec.id) is None or self.upstreams[spec.id].spec is not spec:
                return  # changed meanwhile: the reload that changed it started it afresh
            order = list(self.upstreams)
            await self._halt(spec.id)
            await self._start(spec)
            self.upstreams = {uid: self.upstreams[uid] for uid in order}
            self._ctx.on_change()

    def set_subscriptions(self, upstream_id: str, uris: frozenset[str]) -> None:
        """The URIs (the upstream's own) clients want updates of, from now on and after restarts."""
        self._wanted[upstream_id] = uris
        upstream = self.upstreams.get(upstream_id)
        if upstream is not None:
            upstream.set_subscriptions(uris)
        self.twins.set_subscriptions(upstream_id, uris)

    def set_log_level(self, level: str | None) -> None:
        """The lowest log level a legacy client asked for, for every upstream."""
        self._log_level = level
        for upstream in self.upstreams.values():
            upstream.set_log_level(level)
        self.twins.set_log_level(level)

    async def discover(self, spec: UpstreamSpec) -> tuple[dict[str, Items], str | None]:
        """Connect `spec` once, apart from the supervised upstreams (whether it is enabled or not),
        until it is ready or its first attempt failed (at most the start window): what it lists, and
        why it did not come up (None when it did). The connection is closed before this returns."""
        quiet = replace(self._ctx, on_change=lambda: None, on_notification=lambda upstream, note: None,
                        on_event=lambda record: None)
        probe = Upstream(replace(spec, enabled=True), quiet, self._transports)
        listed: dict[str, Items] = {}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(probe.run)
            with trio.move_on_after(self._startup_deadline_s):
                await probe.first_attempt.wait()
            listed = dict(probe.listed)
            problem = probe.unavailable() or None if not listed else None
            nursery.cancel_scope.cancel()
        if not listed and problem is None:
            problem = f"upstream {spec.id!r} did not come up within {self._startup_deadline_s:g} s"
        return listed, problem

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
                if problem is None:
                    await self._ctx.caught_up()  # its tools are in the surface, not only ready
                return problem

    def ready_tools(self) -> dict[str, tuple[dict[str, Any], ...]]:
        """The tools of every ready upstream, in config order."""
        return {uid: u.tools for uid, u in self.upstreams.items() if u.state is State.READY}

    def ready_lists(self) -> dict[str, dict[str, Items]]:
        """What every ready upstream lists, by kind, in config order."""
        return {uid: u.listed for uid, u in self.upstreams.items() if u.state is State.READY}

    def starting(self) -> bool:
        """Whether an upstream is on its way up now (more changes to the surface may follow soon)."""
        return any(u.state is State.STARTING for u in self.upstreams.values())

    def ready(self) -> dict[str, Upstream]:
        """Every ready upstream, in config order."""
        return {uid: u for uid, u in self.upstreams.items() if u.state is State.READY}

    async def request(self, upstream_id: str, method: str, params: dict[str, Any], *,
                      log_level: str | None = None,
                      on_progress: Callable[[dict[str, Any]], None] | None = None,
                      legacy_client: bool = False) -> dict[str, Any]:
        """`Upstream.request` on the upstream `upstream_id` (for a legacy client, its legacy
        twin when it has a ready one)."""
        upstream = self.upstreams.get(upstream_id)
        if legacy_client:
            upstream = self.twins.for_legacy(upstream) or upstream
        if upstream is None:
            raise UpstreamUnavailable(f"upstream {upstream_id!r} is not configured")
        return await upstream.request(method, params, log_level=log_level, on_progress=on_progress)

    async def call_tool(self, call: UpstreamCall, channel: CallChannel | None = None) -> dict[str, Any]:
        """`Upstream.call_tool` on the upstream `call.upstream` (for a legacy client, its legacy
        twin when it has a ready one)."""
        upstream = self.upstreams.get(call.upstream)
        if call.legacy_client:
            upstream = self.twins.for_legacy(upstream) or upstream
        if upstream is None:
            raise UpstreamUnavailable(f"upstream {call.upstream!r} is not configured")
        return await upstream.call_tool(call, channel)
