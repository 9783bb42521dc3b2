"""The legacy-era adapter (2024-11-05 … 2025-11-25): `initialize`, session hooks and records, and
the legacy call context; every other method is the method table's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import structlog
import trio

from tfunnel.config.model import Settings
from tfunnel.errors import ProtocolError
from tfunnel.gate.gated import NeedsInput
from tfunnel.observe.audit import AuditLog
from tfunnel.protocol import modern
from tfunnel.protocol import session as legacy
from tfunnel.protocol.eras import Era
from tfunnel.protocol.jsonrpc import INVALID_PARAMS, POLICY_DENIED, RESOURCE_NOT_FOUND, Notification, Request
from tfunnel.protocol.results import ToolResult
from tfunnel.protocol.session import NO_TOKEN, ClientSession
from tfunnel.route.channel import LegacyChannel, progress_and_meta, server_requests
from tfunnel.route.methods import INSTRUCTIONS, Methods
from tfunnel.route.peer import Peer, ServerRequests
from tfunnel.surface import profiles
from tfunnel.surface.context import CallContext
from tfunnel.surface.face import Face, funnel_face
from tfunnel.surface.notices import LEVELS, Notices, rank
from tfunnel.surface.profiles import Chosen, Who
from tfunnel.surface.reads import Reader
from tfunnel.surface.upstream_items import Route

log = structlog.get_logger("tfunnel.router")


# A client initialized: its clientInfo, its capabilities, who answers the upstream's questions to it.
Meet = Callable[[Mapping[str, Any], Mapping[str, Any], ServerRequests | None], Awaitable[None]]


class SessionHooks(Protocol):
    async def session_start(self, session_id: str) -> str: ...

    async def session_end(self, session_id: str) -> None: ...


class Resources(Protocol):
    """Where a resource URI goes (`surface.catalog.Catalog.resource`), for subscriptions, as a
    client's profile sees it (`view`)."""

    def resource(self, uri: str) -> Route | str: ...

    def view(self, chosen: Chosen | None) -> Resources: ...


# The profile of a client (`surface.profiles.choose` over the live settings).
Choose = Callable[[Who], Chosen]


def who_of(client_info: Mapping[str, Any], session: ClientSession | None = None) -> Who:
    """What a client's clientInfo (and the bearer token its transport saw, on `session`) says
    about it, for choosing its profile."""
    name = client_info.get("name")
    subject, scopes = (session.token_subject, session.token_scopes) if session is not None else NO_TOKEN
    return Who(client_name=name if isinstance(name, str) else "", subject=subject, scopes=scopes)


class LegacyAdapter:
    def __init__(self, methods: Methods, settings: Callable[[], Settings], hooks: SessionHooks,
                 audit: AuditLog, notices: Notices | None = None,
                 resources: Callable[[], Resources] | None = None, *,
                 face: Callable[[], Face] | None = None, meet: Meet | None = None,
                 choose: Choose | None = None) -> None:
        self._methods = methods
        self._settings = settings
        self._choose: Choose = choose or (lambda who: profiles.choose(settings().profiles, who))
        # Who the server is to a client starting now (tfunnel, or the wrapped upstream).
        self._face = face or (lambda: funnel_face(settings(), lambda: INSTRUCTIONS))
        # Told of each client's initialize before it is answered (a stdio wrap mirrors it upstream).
        self._meet = meet
        # Set when a session's client said `initialized` (for requests held until then).
        self._initialized: dict[str, trio.Event] = {}
        self._hooks = hooks
        self._audit = audit
        self._notices = notices or Notices()
        self._resources = resources

    async def handle(self, session: ClientSession, request: Request, peer: Peer | None) -> dict[str, Any]:
        method = request.method
        if method == "initialize":
            return await self._initialize(session, request.params, peer)
        if method == "logging/setLevel":
            return self._set_level(session, request.params)
        if method in ("resources/subscribe", "resources/unsubscribe"):
            return self._subscription(session, method, request.params)
        return await self._methods.handle(Era.LEGACY, method, request.params,
                                          _LegacySite(session, request, peer, self._methods.bridged,
                                                      self._chosen(session)))

    def _chosen(self, session: ClientSession) -> Chosen:
        """The session's profile, chosen for each of its requests (cheap: `profiles.choose` caches)."""
        return self._choose(who_of(session.client_info, session))

    async def _met(self, session: ClientSession, params: dict[str, Any], peer: Peer | None) -> None:
        """Tell of the client before it is answered (what it offered; `legacy.initialize` then
        checks it): under a wrap it may be presented upstream, which the answer then shows."""
        if self._meet is None:
            return
        info, capabilities = params.get("clientInfo"), params.get("capabilities")
        info = info if isinstance(info, dict) else {}
        capabilities = capabilities if isinstance(capabilities, dict) else {}
        requests = None
        if peer is not None and peer.can_request:
            requests = _after(self._initialized.setdefault(session.id, trio.Event()),
                              server_requests(capabilities, peer))
        await self._meet(info, capabilities, requests)

    def _set_level(self, session: ClientSession, params: dict[str, Any]) -> dict[str, Any]:
        level = params.get("level")
        if rank(level) is None:
            raise ProtocolError(INVALID_PARAMS, f'Invalid params: "level" must be one of {", ".join(LEVELS)}')
        assert isinstance(level, str)
        session.log_level = level
        if session.push is not None:
            def hears(upstream: str) -> bool:
                return profiles.allows_upstream(self._chosen(session).profile, upstream)

            self._notices.set_level(session.id, session.push, level, hears)
        return {}

    def _subscription(self, session: ClientSession, method: str, params: dict[str, Any]) -> dict[str, Any]:
        uri = params.get("uri")
        if not isinstance(uri, str) or not uri:
            raise ProtocolError(INVALID_PARAMS, 'Invalid params: "uri" must be a non-empty string')
        found = (self._resources().view(self._chosen(session)).resource(uri) if self._resources is not None
                 else f"no resource {uri!r}")
        if isinstance(found, str):
            raise ProtocolError(RESOURCE_NOT_FOUND, f"Resource not found: {found}", {"uri": uri})
        if method == "resources/unsubscribe":
            self._notices.unsubscribe(session.id, found.upstream, found.original)
        elif session.push is not None:
            self._notices.subscribe(session.id, session.push, found.upstream, found.original, uri)
        return {}

    def notify(self, session: ClientSession, note: Notification) -> None:
        if note.method in ("notifications/initialized", "initialized"):
            session.initialized = True
            if session.id in self._initialized:
                self._initialized[session.id].set()

    async def end_session(self, session: ClientSession) -> None:
        """The client went away: it asks for no more notices; fire Stop hooks, record the end."""
        self._notices.drop(session.id)
        self._initialized.pop(session.id, None)
        self._methods.ended(session.id)
        if session.protocol_version is None:
            return
        await self._hooks.session_end(session.id)
        self._audit.record("client", event="end", session=session.id, client=session.label)

    async def _initialize(self, session: ClientSession, params: dict[str, Any],
                          peer: Peer | None) -> dict[str, Any]:
        await self._met(session, params, peer)
        face = self._face()
        # Chosen by what this initialize says (the session records it only as it is answered).
        info = params.get("clientInfo")
        chosen = self._choose(who_of(info if isinstance(info, dict) else {}, session))
        result = legacy.initialize(session, params, face.server_info, face.instructions_for(chosen),
                                   face.capabilities_copy() if face.wrapped is not None else None)
        context = await self._hooks.session_start(session.id)
        if context:
            shown = result.get("instructions")
            result["instructions"] = f"{shown}\n\n{context}" if shown else context
        self._methods.instructed(CallContext(session.id, profile=chosen), result.get("instructions") or "")
        log.info("client session", client=session.label, protocol=session.protocol_version,
                 profile=chosen.name)
        self._audit.record("client", event="connect", session=session.id, client=session.label,
                           protocolVersion=session.protocol_version, profile=chosen.name,
                           profileBy=chosen.why, surface="full" if chosen.full else "lean")
        return result


# How long an upstream's request for a client that is still initializing waits for it.
INITIALIZED_WAIT_S = 10.0


def _after(initialized: trio.Event, requests: ServerRequests) -> ServerRequests:
    """`requests`, held until the client said `initialized` (a server may ask a client nothing
    before that; an upstream presented the client may ask at once), at most `INITIALIZED_WAIT_S`."""
    async def ask(method: str, params: dict[str, Any]) -> dict[str, Any]:
        with trio.move_on_after(INITIALIZED_WAIT_S):
            await initialized.wait()
        return await requests(method, params)

    return ask


class _LegacySite:
    """A legacy client's call: asked, and answering upstreams, through real requests to it."""

    def __init__(self, session: ClientSession, request: Request, peer: Peer | None,
                 bridged: Callable[[], tuple[str, ...]], profile: Chosen) -> None:
        self.profile = profile
        self._session = session
        self._request = request
        self._peer = peer
        self._bridged = bridged

    def context(self) -> CallContext:
        channel = LegacyChannel(self._session.capabilities, self._peer, self._request.params,
                                log_level=self._session.log_level, bridged=self._bridged())
        return CallContext(self._session.id, str(self._request.id), channel, self.profile)

    def finish(self, name: str, outcome: ToolResult | NeedsInput) -> dict[str, Any]:
        if isinstance(outcome, NeedsInput):
            # Not reached: a legacy channel answers every question itself (or declines it).
            return ToolResult.failure(f"{name!r} needs input this client cannot give").to_wire()
        return outcome.to_wire()

    def reader(self) -> Reader:
        channel = LegacyChannel(self._session.capabilities, self._peer, self._request.params)
        progress, _ = progress_and_meta(self._request.params, self._peer)
        return Reader(self._session.id, str(self._request.id), channel.ask_user, channel.meta,
                      self._session.log_level, progress=progress, profile=self.profile)

    def view(self, name: str, outcome: dict[str, Any] | NeedsInput) -> dict[str, Any]:
        if isinstance(outcome, NeedsInput):
            # Not reached: a legacy reader is asked by request (or not at all).
            raise ProtocolError(POLICY_DENIED, f"{name!r} needs a confirmation this client cannot give")
        return modern.legacy_view(outcome)
