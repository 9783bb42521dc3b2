"""The face clients meet: tfunnel's own, or under a wrap the wrapped upstream's.

Under a wrap the upstream's identity is its last handshake in this process (`Upstream.connection`,
kept across its restarts; a changed definition is a new upstream, which must connect first), and
its instructions are the approved ones (`home.reviewed`), the last shown while it is down.
"""

from __future__ import annotations

from collections.abc import Callable

from tfunnel.home.live import Live
from tfunnel.home.reviewed import Reviewed
from tfunnel.surface.face import Face, funnel_face, unknown_identity
from tfunnel.upstream.supervisor import Supervisor


class Faces:
    def __init__(self, live: Live, supervisor: Supervisor, reviewed: Reviewed,
                 funnel_instructions: Callable[[], str]) -> None:
        self._live = live
        self._supervisor = supervisor
        self._reviewed = reviewed
        self._funnel_instructions = funnel_instructions
        # The approved instructions each wrapped upstream last showed (for while it is down).
        self._shown: dict[str, str] = {}

    def face(self) -> Face:
        """Who the server is now; raises `ProtocolError` under a wrap whose upstream has not
        connected in this process (there is no identity to show, and ours would be a lie)."""
        wrap = self._live.catalog.wrap
        if wrap is None:
            return funnel_face(self._live.settings, self._funnel_instructions)
        upstream = self._supervisor.upstreams.get(wrap.upstream)
        connection = upstream.connection if upstream is not None else None
        if connection is None:
            raise unknown_identity(wrap.upstream)
        uid = wrap.upstream
        return Face(dict(connection.server_info), connection.capabilities, lambda: self._instructions(uid),
                    wrapped=uid)

    def waiting(self) -> str | None:
        """Under a wrap whose upstream has not connected in this process: its id (a client
        starting now waits for it, `settle`); else None."""
        wrap = self._live.catalog.wrap
        if wrap is None:
            return None
        upstream = self._supervisor.upstreams.get(wrap.upstream)
        return wrap.upstream if upstream is None or upstream.connection is None else None

    async def settle(self) -> None:
        """Wait (bounded by the start window) while the wrapped upstream makes its first
        connection: a client spawning the gateway asks at once, and must meet the upstream."""
        upstream = self.waiting()
        if upstream is not None:
            await self._supervisor.wait_ready(upstream)

    def _instructions(self, upstream: str) -> str:
        shown = self._reviewed.instructions()
        if upstream in shown:
            self._shown[upstream] = shown[upstream]
        return self._shown.get(upstream, "")
