"""The face clients meet: tfunnel's own, or under a wrap the wrapped upstream's.

Under a wrap the upstream's identity is its last handshake in this process (`Upstream.connection`,
kept across its restarts; a changed definition is a new upstream, which must connect first), and
its instructions are the approved ones (`home.reviewed`), the last shown while it is down.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tfunnel.config.model import Settings
from tfunnel.home.live import Live
from tfunnel.home.reviewed import Reviewed
from tfunnel.protocol.session import CARRIED_CLIENT_CAPABILITIES
from tfunnel.surface.face import UNCARRIED, Face, funnel_face, unknown_identity
from tfunnel.surface.profiles import Chosen
from tfunnel.upstream.handshake import Connection
from tfunnel.upstream.session import ServerRequests
from tfunnel.upstream.supervisor import Identity, Mirror, Supervisor, Upstream


class Faces:
    def __init__(self, live: Live, supervisor: Supervisor, reviewed: Reviewed,
                 funnel_instructions: Callable[[Chosen | None], str]) -> None:
        self._live = live
        self._supervisor = supervisor
        self._reviewed = reviewed
        self._funnel_instructions = funnel_instructions
        # The approved instructions each wrapped upstream last showed (for while it is down).
        self._shown: dict[str, str] = {}
        # Each wrapped upstream's last handshake (it survives a failed one), while the same
        # upstream (definition) is configured.
        self._known: dict[str, tuple[Upstream, Connection]] = {}
        # Set by the stdio transport: its one client is presented upstream as itself.
        self.mirroring = False
        self._funnel: tuple[Settings, Face] | None = None  # tfunnel's face, for its settings

    def face(self) -> Face:
        """Who the server is now; raises `ProtocolError` under a wrap whose upstream has not
        connected in this process (there is no identity to show, and ours would be a lie)."""
        wrap = self._live.catalog.wrap
        if wrap is None:  # tfunnel's own: the same face while the settings are the same object
            settings = self._live.settings
            if self._funnel is None or self._funnel[0] is not settings:
                self._funnel = (settings, funnel_face(settings, lambda: self._funnel_instructions(None),
                                                      self._funnel_instructions))
            return self._funnel[1]
        uid = wrap.upstream
        connection = self._connection(uid)
        if connection is None:
            raise unknown_identity(uid)
        capabilities = {k: v for k, v in connection.capabilities.items() if k not in UNCARRIED}
        return Face(dict(connection.server_info), capabilities, lambda: self._instructions(uid), wrapped=uid)

    def _connection(self, uid: str) -> Connection | None:
        """The last handshake of the configured upstream `uid` (None: it never connected)."""
        upstream = self._supervisor.upstreams.get(uid)
        if upstream is None:
            return None
        if upstream.connection is not None:
            self._known[uid] = (upstream, upstream.connection)
            return upstream.connection
        known = self._known.get(uid)
        # A restart for a mirrored client keeps the definition: the same server, the same face.
        if known is not None and known[0].spec.definition() == upstream.spec.definition():
            return known[1]
        return None

    def waiting(self) -> str | None:
        """Under a wrap whose upstream has not connected in this process: its id (a client
        starting now waits for it, `settle`); else None."""
        wrap = self._live.catalog.wrap
        if wrap is None:
            return None
        return wrap.upstream if self._connection(wrap.upstream) is None else None

    async def meet(self, client_info: Mapping[str, Any], capabilities: Mapping[str, Any],
                   requests: ServerRequests | None) -> None:
        """A legacy client initialized. Under a stdio wrap it is presented upstream as itself (its
        clientInfo and the capabilities tfunnel carries back to it; `requests` answers the
        upstream's questions no call owns), the upstream connecting again if it knew another;
        under any wrap, a dual-era upstream gets a legacy-era twin for such clients."""
        wrap = self._live.catalog.wrap
        if wrap is None:
            return
        if self.mirroring:
            name, version = client_info.get("name"), client_info.get("version")
            declared = {k: v for k, v in capabilities.items() if k in CARRIED_CLIENT_CAPABILITIES}
            if isinstance(declared.get("roots"), Mapping):  # its roots/list_changed is not relayed
                declared["roots"] = {k: v for k, v in declared["roots"].items() if k != "listChanged"}
            identity = Identity(name if isinstance(name, str) and name else self._live.settings.client_name,
                                version if isinstance(version, str) and version else "0.0.0", declared)
            await self._supervisor.mirror(wrap.upstream, Mirror(identity, requests))
        else:
            await self.settle()
        # A legacy client of a dual-era upstream meets it in the legacy era (`upstream.twins`).
        await self._supervisor.legacy_twin(wrap.upstream)

    async def settle(self) -> None:
        """Wait (bounded by the start window) while the wrapped upstream makes its first
        connection: a client spawning the gateway asks at once, and must meet the upstream."""
        upstream = self.waiting()
        if upstream is not None:
            self._supervisor.release_client(upstream)  # no legacy initialize to present: go on
            await self._supervisor.first_attempt(upstream)

    def _instructions(self, upstream: str) -> str:
        shown = self._reviewed.instructions()
        if upstream in shown:
            self._shown[upstream] = shown[upstream]
        return self._shown.get(upstream, "")
