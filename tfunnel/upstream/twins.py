"""Legacy twins: a second, legacy-era connection to a wrapped dual-era upstream.

A dual-era server serves one era per connection (the SDK's locks a connection to the era of its
first request), and some of what it offers exists in one era only: a legacy-era tool that asks
the client by a server-to-client request, a modern-era one that answers `input_required`. The
supervisor reaches a dual-era upstream in the modern era; under a wrap, its legacy clients get a
twin of it (the same definition, pinned to the legacy era), started at the first legacy client's
`initialize`, so each client meets the server in its own era. A twin never feeds the surface
(what clients are shown is the supervised upstream's, reviewed); it only answers legacy
clients' requests, and a twin that is not ready leaves them to the supervised upstream (bridged).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import structlog
import trio

from tfunnel.protocol.eras import Era
from tfunnel.upstream.states import Context, Mirror, State
from tfunnel.upstream.supervised import Upstream
from tfunnel.upstream.transport import TransportFactory

log = structlog.get_logger("tfunnel.upstream")


@dataclass
class _Twin:
    upstream: Upstream
    scope: trio.CancelScope
    source: object  # the definition of the supervised upstream it twins (`UpstreamSpec.definition`)


class Twins:
    def __init__(self, ctx: Context, transports: TransportFactory, startup_deadline_s: float) -> None:
        # Its own lists change nothing (the surface is the supervised upstream's); its lifecycle
        # records say it is the twin.
        self._ctx = replace(ctx, on_change=lambda: None,
                            on_event=lambda record: ctx.on_event({**record, "twin": "legacy"}))
        self._transports = transports
        self._deadline_s = startup_deadline_s
        self._twins: dict[str, _Twin] = {}
        self._starting = trio.Lock()
        self.nursery: trio.Nursery | None = None  # the supervisor's, while it serves

    async def ensure(self, main: Upstream, mirror: Mirror | None, wanted: frozenset[str],
                     level: str | None) -> None:
        """A twin for `main` when it is a modern-era connection to an upstream that may also speak
        legacy (not `modernOnly`); waits (bounded) for its first attempt."""
        spec = main.spec
        if main.era is not Era.MODERN or spec.modern_only or not spec.enabled or self.nursery is None:
            return
        async with self._starting:  # two legacy clients arriving together make one twin
            twin = self._twins.get(spec.id)
            if twin is not None and twin.source != spec.definition():
                self.drop(spec.id)
                twin = None
            if twin is None:
                upstream = Upstream(replace(spec, legacy_pin=True), self._ctx, self._transports)
                upstream.mirror, upstream.wanted_uris, upstream.log_level = mirror, wanted, level
                scope = await self.nursery.start(_supervise, upstream)
                twin = self._twins[spec.id] = _Twin(upstream, scope, spec.definition())
                log.info("legacy twin starting for the wrap's legacy clients", upstream=spec.id)
        with trio.move_on_after(self._deadline_s):
            await twin.upstream.first_attempt.wait()

    def drop(self, upstream_id: str | None) -> None:
        """Stop `upstream_id`'s twin (its child is stopped by its own incarnation, in the
        supervisor's nursery)."""
        twin = self._twins.pop(upstream_id or "", None)
        if twin is not None:
            twin.upstream.halting = True
            twin.scope.cancel()

    def for_legacy(self, main: Upstream | None) -> Upstream | None:
        """The twin a legacy client's request to `main` goes to: ready, of the same definition."""
        if main is None:
            return None
        twin = self._twins.get(main.spec.id)
        if twin is None or twin.upstream.state is not State.READY or twin.source != main.spec.definition():
            return None
        return twin.upstream

    def set_subscriptions(self, upstream_id: str, uris: frozenset[str]) -> None:
        twin = self._twins.get(upstream_id)
        if twin is not None:
            twin.upstream.set_subscriptions(uris)

    def set_log_level(self, level: str | None) -> None:
        for twin in self._twins.values():
            twin.upstream.set_log_level(level)

    def set_mirror(self, upstream_id: str, mirror: Mirror | None) -> Upstream | None:
        """The twin of `upstream_id` presents `mirror` from its next handshake; it is returned
        when its last one presented another identity (the caller restarts it)."""
        twin = self._twins.get(upstream_id)
        if twin is None:
            return None
        twin.upstream.mirror = mirror
        wanted = mirror.identity if mirror is not None else self._ctx.identity
        presented = twin.upstream.presented
        return twin.upstream if presented is not None and presented != wanted else None

    def statistics(self) -> dict[str, Any]:
        return {uid: twin.upstream.statistics() for uid, twin in self._twins.items()}


async def _supervise(upstream: Upstream, *, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
    with trio.CancelScope() as scope:
        task_status.started(scope)
        await upstream.run()
