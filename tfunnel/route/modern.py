"""The modern-era adapter (2026-07-28): stateless, everything the server needs is in `_meta`.

Its own methods: `server/discover` and `subscriptions/listen`; the rest is the method table's,
with the modern call context (MRTR: the gate's `ask` and an upstream's questions come back as
`NeedsInput`, sealed here into an `input_required` result whose `requestState` carries what was
already answered). Every result is finished by `protocol.modern.complete` (resultType, cache
hints, serverInfo).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import structlog
import trio

from tfunnel.config.model import Settings
from tfunnel.errors import ProtocolError
from tfunnel.gate.gated import AskUser, NeedsInput
from tfunnel.protocol import modern, mrtr
from tfunnel.protocol.eras import Era
from tfunnel.protocol.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    RESOURCE_NOT_FOUND,
    Request,
)
from tfunnel.protocol.results import ToolResult
from tfunnel.protocol.session import ClientSession
from tfunnel.route.bridge import Resume
from tfunnel.route.channel import BRIDGED, CONFIRM_SCHEMA, ModernChannel, progress_and_meta
from tfunnel.route.legacy import Choose, Resources, who_of
from tfunnel.route.methods import INSTRUCTIONS, Methods
from tfunnel.route.parking import Parking
from tfunnel.route.peer import Peer
from tfunnel.surface import profiles
from tfunnel.surface.changes import Changes
from tfunnel.surface.context import CallContext
from tfunnel.surface.face import Face, funnel_face
from tfunnel.surface.notices import Notices, via
from tfunnel.surface.profiles import Chosen
from tfunnel.surface.reads import Reader
from tfunnel.surface.upstream_items import Route

log = structlog.get_logger("tfunnel.router")

# Listen streams open at once, over every transport; one operator never needs more.
MAX_LISTEN_STREAMS = 64
# Resource URIs one listen stream may subscribe to.
MAX_SUBSCRIPTIONS = 256
# The list_changed flags of `subscriptions/listen`, and the list each is about.
LISTEN_KINDS = {"toolsListChanged": "tools", "promptsListChanged": "prompts",
                "resourcesListChanged": "resources"}
# The key of the gate's yes/no question among a call's inputRequests.
CONFIRM_PREFIX = "tfunnel/confirm-"


class ModernAdapter:
    def __init__(self, methods: Methods, settings: Callable[[], Settings], tools_changed: Changes, *,
                 sealer: mrtr.Sealer | None = None, parking: Parking | None = None,
                 notices: Notices | None = None, resources: Callable[[], Resources] | None = None,
                 face: Callable[[], Face] | None = None, choose: Choose | None = None) -> None:
        self._choose: Choose = choose or (lambda who: profiles.choose(settings().profiles, who))
        self._notices = notices or Notices()
        self._resources = resources
        self._methods = methods
        self._settings = settings
        # Who the server is to a client now (tfunnel, or the wrapped upstream).
        self._face = face or (lambda: funnel_face(settings(), lambda: INSTRUCTIONS))
        self._changes = tools_changed
        self._sealer = sealer or mrtr.Sealer()
        # Upstream calls waiting between a client's rounds; `parking.run` is started by the app.
        self.parking = parking or Parking()
        self.listening = 0

    def profile_for(self, client_info: Mapping[str, Any], session: ClientSession | None = None) -> Chosen:
        """The profile of a modern request's client (chosen anew for each request; `session`
        carries what its bearer token said)."""
        return self._choose(who_of(client_info, session))

    async def handle(self, request: Request, peer: Peer | None,
                     session: ClientSession | None = None) -> dict[str, Any]:
        env = modern.envelope(request.params)
        method = request.method
        face = self._face()
        if method == "server/discover":
            chosen = self.profile_for(env.client_info, session)
            instructions = face.instructions_for(chosen)
            result = modern.discover_result(face.capabilities_copy(), instructions or None)
            self._methods.instructed(CallContext(profile=chosen), instructions)
        elif method == "subscriptions/listen":
            result = await self._listen(request, peer, session)
        else:
            site = _ModernSite(request, env, peer, self._sealer, self.parking, self._notices,
                               self._methods.bridged, self.profile_for(env.client_info, session))
            try:
                result = await self._methods.handle(Era.MODERN, method, request.params, site)
            except ProtocolError as exc:
                if exc.code != RESOURCE_NOT_FOUND:
                    raise
                # The modern era has no -32002: a resource not found is invalid params.
                raise ProtocolError(INVALID_PARAMS, exc.message, exc.data) from None
        return modern.complete(result, method, face.server_info)

    # --- subscriptions/listen -----------------------------------------------------------------

    async def _listen(self, request: Request, peer: Peer | None,
                      session: ClientSession | None = None) -> dict[str, Any]:
        wanted = request.params.get("notifications", {})
        if not isinstance(wanted, dict):
            raise ProtocolError(INVALID_PARAMS, 'Invalid params: "notifications" must be an object')
        if peer is None:
            raise ProtocolError(METHOD_NOT_FOUND, "Method not found: subscriptions/listen needs a stream")
        if self.listening >= MAX_LISTEN_STREAMS:
            raise ProtocolError(INTERNAL_ERROR, f"too many listen streams (at most {MAX_LISTEN_STREAMS})")
        honoured: dict[str, Any] = {flag: True for flag in LISTEN_KINDS if wanted.get(flag) is True}
        kinds = {LISTEN_KINDS[flag] for flag in honoured}
        chosen = self.profile_for(modern.envelope(request.params).client_info, session)
        subscribed = self._subscriptions(wanted.get("resourceSubscriptions"), chosen)
        if subscribed:
            honoured["resourceSubscriptions"] = list(dict.fromkeys(subscribed.values()))
        tag = {modern.SUBSCRIPTION_ID_META: request.id}
        self.listening += 1
        try:
            await peer.notify("notifications/subscriptions/acknowledged",
                              {"_meta": tag, "notifications": honoured})
            with self._notices.listening(object(), via(peer.notify_nowait), subscribed, tag):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_cancel_on, peer.ending, nursery.cancel_scope)
                    seen = self._changes.version
                    while True:
                        before = seen
                        seen = await self._changes.next_burst(seen)
                        for kind in self._changes.changed_since(before):
                            if kind in kinds:
                                await peer.notify(f"notifications/{kind}/list_changed", {"_meta": tag})
        finally:
            self.listening -= 1
        log.info("listen stream ended by the server", id=request.id)
        return {"_meta": tag}  # the graceful end (PROTOCOL.md §3.10)

    def _subscriptions(self, uris: Any, chosen: Chosen) -> dict[tuple[str, str], str]:
        """The resource URIs of a listen request that lead to an upstream, by (upstream, its URI)."""
        if uris is None:
            return {}
        if not isinstance(uris, list) or not all(isinstance(u, str) for u in uris):
            raise ProtocolError(INVALID_PARAMS,
                                'Invalid params: "resourceSubscriptions" must be a list of URIs')
        found: dict[tuple[str, str], str] = {}
        resources = self._resources().view(chosen) if self._resources is not None else None
        for uri in uris[:MAX_SUBSCRIPTIONS]:
            target = resources.resource(uri) if resources is not None else None
            if isinstance(target, Route):
                found[target.upstream, target.original] = uri
        return found


class _ModernSite:
    """A modern client's call (MRTR): its retry's answers and sealed state in, and what is still
    unanswered sealed into an `input_required` result out."""

    def __init__(self, request: Request, env: modern.Envelope, peer: Peer | None, sealer: mrtr.Sealer,
                 parking: Parking, notices: Notices, bridged: Callable[[], tuple[str, ...]],
                 profile: Chosen) -> None:
        self.profile = profile
        self._bridged = bridged
        self._notices = notices
        self._request = request
        self._env = env
        self._peer = peer
        self._sealer = sealer
        self._parking = parking
        self._binding = ""
        self._approved: set[str] = set()

    def _open(self) -> tuple[dict[str, Any], mrtr.RequestState | None]:
        """This round's answers and the sealed state of the round before it (bound to this
        method and params), if the client echoed one."""
        params = self._request.params
        responses = params.get("inputResponses", {})
        if not isinstance(responses, dict):
            raise ProtocolError(INVALID_PARAMS, 'Invalid params: "inputResponses" must be an object')
        token = params.get("requestState")
        state = self._sealer.open(token, self._bound()) if token is not None else None
        self._approved = set(state.approved if state else ())
        return responses, state

    def _bound(self) -> str:
        """What ties a state to this request (`mrtr.binding`): a digest of the canonical params,
        made only when a state is opened or sealed (most requests carry none and ask nothing)."""
        if not self._binding:
            self._binding = mrtr.binding(self._request.method, self._request.params)
        return self._binding

    def _ask(self, responses: dict[str, Any], state: mrtr.RequestState | None) -> AskUser | None:
        # Answers count only for the questions our sealed state says were asked: without a
        # requestState (or for another question) the gate asks again.
        asked = frozenset(state.asked if state else ())
        return _asker(self._env, responses, self._approved, asked)

    def _unsealed(self, responses: Mapping[str, Any],
                  state: mrtr.RequestState | None) -> dict[str, Any] | None:
        """Under a wrap, answers sent without any state of ours: the wrapped upstream's to judge
        (a server may take inputResponses on a first request), so they go to it as they came."""
        if state is not None or self._bridged() == BRIDGED:
            return None
        answers = {k: v for k, v in responses.items() if not k.startswith(CONFIRM_PREFIX)}
        return answers or None

    def context(self) -> CallContext:
        responses, state = self._open()
        resume = None
        if state is not None and (state.upstream_state is not None or state.parked is not None):
            answers = {k: v for k, v in responses.items() if not k.startswith(CONFIRM_PREFIX)}
            resume = Resume(answers, state.upstream_state, state.parked)
        elif (unsealed := self._unsealed(responses, state)) is not None:
            resume = Resume(unsealed, "", None)
        channel = ModernChannel(self._env, self._peer, self._request.params, resume=resume,
                                parking=self._parking, ask_user=self._ask(responses, state),
                                notices=self._notices, bridged=self._bridged())
        return CallContext("", str(self._request.id), channel, self.profile)

    def reader(self) -> Reader:
        # A read's gate `ask` is an MRTR round like a call's (prompts/get and resources/read may
        # answer input_required; completion/complete is not gated).
        responses, state = self._open()
        progress, meta = progress_and_meta(self._request.params, self._peer)
        notify = self._peer.notify_nowait if self._peer is not None else None
        continuation = None
        if state is not None and state.upstream_state is not None:  # the upstream asked last round
            answers = {k: v for k, v in responses.items() if not k.startswith(CONFIRM_PREFIX)}
            continuation = {"inputResponses": answers,
                            **({"requestState": state.upstream_state} if state.upstream_state else {})}
        elif (unsealed := self._unsealed(responses, state)) is not None:
            continuation = {"inputResponses": unsealed}
        return Reader("", str(self._request.id), self._ask(responses, state), meta, self._env.log_level,
                      notify, progress, modern=True, continuation=continuation, profile=self.profile)

    def view(self, name: str, outcome: dict[str, Any] | NeedsInput) -> dict[str, Any]:
        if isinstance(outcome, NeedsInput):
            return self._input_required(name, outcome)
        return outcome  # `modern.complete` adds what a modern client needs

    def finish(self, name: str, outcome: ToolResult | NeedsInput) -> dict[str, Any]:
        if not isinstance(outcome, NeedsInput):
            return outcome.to_wire()
        return self._input_required(name, outcome)

    def _input_required(self, name: str, outcome: NeedsInput) -> dict[str, Any]:
        questions = [key[len(CONFIRM_PREFIX):] for key in outcome.requests if key.startswith(CONFIRM_PREFIX)]
        try:
            sealed = self._sealer.seal(self._bound(), approved=sorted(self._approved), asked=questions,
                                       upstream_state=outcome.upstream_state, parked=outcome.parked)
        except ValueError:  # an upstream's own state too large to carry inside ours
            return ToolResult.failure(f"{name!r} needs input, but its upstream's requestState is "
                                      "too large to carry").to_wire()
        return {"resultType": "input_required", "inputRequests": dict(outcome.requests),
                "requestState": sealed}


def _asker(env: modern.Envelope, responses: Mapping[str, Any], approved: set[str],
           asked: frozenset[str]) -> AskUser | None:
    """The gate's `ask` for a modern client: answered from this retry's inputResponses (to a
    question the last round asked) or an earlier round's approval; otherwise the question itself,
    as `NeedsInput` (the call ends with input_required)."""
    if not env.declared("elicitation"):
        return None  # the gate uses gate.askFallback

    async def ask(message: str) -> bool | NeedsInput:
        digest = mrtr.question_digest(message)
        if digest in approved:
            return True
        answer = responses.get(CONFIRM_PREFIX + digest) if digest in asked else None
        if isinstance(answer, Mapping):
            accepted = answer.get("action") == "accept"
            if accepted:
                approved.add(digest)
            return accepted
        return NeedsInput({CONFIRM_PREFIX + digest: {
            "method": "elicitation/create",
            "params": {"mode": "form", "message": message, "requestedSchema": CONFIRM_SCHEMA}}})

    return ask


async def _cancel_on(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
