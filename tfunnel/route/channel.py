"""The caller's channel of one tool call (`surface.context.ClientChannel`), one per era.

Each era adapter builds one per `tools/call`: a legacy client is asked (and answers upstreams'
questions) through real requests, when it declared the capability and the transport carries
requests; a modern client answers on its retry (MRTR), so its questions come back as
`NeedsInput` values. Both relay progress when the caller gave a token and can be told.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from tfunnel.errors import ProtocolError
from tfunnel.gate.gated import AskUser, NeedsInput
from tfunnel.protocol import modern
from tfunnel.protocol.jsonrpc import METHOD_NOT_FOUND
from tfunnel.protocol.meta import reserved
from tfunnel.protocol.session import CARRIED_CLIENT_CAPABILITIES, DECLINED
from tfunnel.route import bridge
from tfunnel.route.bridge import Resume
from tfunnel.route.parking import Parking
from tfunnel.route.peer import Peer, Progress, ServerRequests
from tfunnel.surface.context import Upstreams
from tfunnel.surface.notices import Notices, via
from tfunnel.upstream.call import UpstreamCall

log = structlog.get_logger("tfunnel.router")

# A yes/no confirmation: accepting the (empty) form is "yes".
CONFIRM_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
# The client capabilities an upstream call declares for the caller, when it declared them: what
# tfunnel carries back to it. Under a wrap the upstream is the server, so all it may ask for.
BRIDGED = ("elicitation",)
WRAPPED = CARRIED_CLIENT_CAPABILITIES


def _declared(capabilities: Mapping[str, Any], kinds: tuple[str, ...]) -> dict[str, Any]:
    return {kind: capabilities[kind] for kind in kinds if isinstance(capabilities.get(kind), Mapping)}


class LegacyChannel:
    """A legacy client's side of one call (`peer` None: a caller that can be asked nothing)."""

    def __init__(self, capabilities: Mapping[str, Any], peer: Peer | None, params: Mapping[str, Any], *,
                 log_level: str | None = None, bridged: tuple[str, ...] = BRIDGED) -> None:
        self._progress, self._meta = progress_and_meta(params, peer)
        self._log_level = log_level  # the session's, stamped on calls to modern upstreams
        self.meta = self._meta  # the caller's `_meta` to forward (a read's, too)
        self._capabilities: Mapping[str, Any] = {}
        self._requests: ServerRequests | None = None
        self.ask_user: AskUser | None = None
        if peer is not None and peer.can_request:
            self._requests = server_requests(capabilities, peer)
            self._capabilities = _declared(capabilities, bridged)
            if isinstance(capabilities.get("elicitation"), dict):
                self.ask_user = _asker(peer)

    async def call_upstream(self, upstreams: Upstreams, upstream: str, tool: str,
                            arguments: Mapping[str, Any]) -> dict[str, Any] | NeedsInput:
        call = UpstreamCall(upstream, tool, arguments, self._meta, self._capabilities, self._log_level,
                            legacy_client=True)
        return await bridge.legacy_call(upstreams, call, self._requests, self._progress)


class ModernChannel:
    """A modern client's side of one call: it answers questions on its retry, never by request."""

    def __init__(self, env: modern.Envelope, peer: Peer | None, params: Mapping[str, Any], *,
                 ask_user: AskUser | None, resume: Resume | None, parking: Parking | None,
                 notices: Notices | None = None, bridged: tuple[str, ...] = BRIDGED) -> None:
        self._peer = peer
        self._notices = notices or Notices()
        self._progress, self._meta = progress_and_meta(params, peer)
        self._capabilities = _declared(env.client_capabilities, bridged)
        self._log_level = env.log_level
        self._resume = resume
        self._parking = parking
        self.ask_user = ask_user

    async def call_upstream(self, upstreams: Upstreams, upstream: str, tool: str,
                            arguments: Mapping[str, Any]) -> dict[str, Any] | NeedsInput:
        call = UpstreamCall(upstream, tool, arguments, self._meta, self._capabilities, self._log_level)
        with self._notices.during(upstream, self._log_level,
                                  via(self._peer.notify_nowait) if self._peer is not None else None):
            return await bridge.modern_call(upstreams, call, self._resume, self._parking, self._progress)


def progress_and_meta(params: Mapping[str, Any], peer: Peer | None,
                      ) -> tuple[Progress | None, dict[str, Any] | None]:
    """How to relay upstream progress to the caller (when it gave a token and can be told), and
    the caller's `_meta` to forward upstream (minus protocol-owned keys and its own token)."""
    meta = params.get("_meta")
    meta = meta if isinstance(meta, dict) else {}
    token = meta.get("progressToken")
    progress = None
    if peer is not None and isinstance(token, str | int) and not isinstance(token, bool):
        def progress(update: dict[str, Any]) -> None:
            relayed: dict[str, Any] = {k: update[k] for k in ("progress", "total", "message") if k in update}
            peer.notify_nowait("notifications/progress", {**relayed, "progressToken": token})
    forward = {k: v for k, v in meta.items()
               if k != "progressToken" and not reserved(k)}
    return progress, forward or None


def server_requests(capabilities: Mapping[str, Any], peer: Peer) -> ServerRequests:
    """An upstream's questions to a legacy client: real requests to it for what it declared; the
    declined defaults for the rest."""
    async def forward(method: str, params: dict[str, Any]) -> dict[str, Any]:
        if not bridge.declared(method, capabilities):
            if method not in DECLINED:  # nothing to decline with: what a client without it answers
                raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {method}")
            return bridge.declined(method)
        return await peer.request(method, params)

    return forward


def _asker(peer: Peer) -> AskUser:
    """Ask through `elicitation/create` (a failed request counts as declined)."""
    async def ask(message: str) -> bool | NeedsInput:
        try:
            answer = await peer.request("elicitation/create",
                                        {"message": message, "requestedSchema": CONFIRM_SCHEMA})
        except ProtocolError as exc:
            log.warning("elicitation failed; treated as declined", error=exc.message)
            return False
        return answer.get("action") == "accept"

    return ask
