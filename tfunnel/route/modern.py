"""Modern-era (2026-07-28) requests: stateless, everything the server needs is in `_meta`.

Served methods: `server/discover`, `tools/list`, `tools/call` (with MRTR: the gate's `ask` and an
upstream's questions become an `input_required` result whose sealed `requestState` carries what
was already answered) and `subscriptions/listen`. Everything else is -32601. Every result is
finished by `protocol.modern.complete` (resultType, cache hints, serverInfo).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import structlog
import trio

from tfunnel.config.model import Settings
from tfunnel.errors import InputRequired, ProtocolError
from tfunnel.gate.gated import AskUser
from tfunnel.protocol import modern, mrtr
from tfunnel.protocol.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, Request
from tfunnel.protocol.results import ToolResult
from tfunnel.protocol.session import SERVER_CAPABILITIES, empty_capability
from tfunnel.surface.changes import Changes
from tfunnel.surface.context import CallContext, Resume
from tfunnel.surface.service import Surface

log = structlog.get_logger("tfunnel.router")

# Listen streams open at once, over every transport; one operator never needs more.
MAX_LISTEN_STREAMS = 64
# The key of the gate's yes/no question among a call's inputRequests.
CONFIRM_PREFIX = "tfunnel/confirm-"
# A yes/no confirmation: accepting the (empty) form is "yes".
CONFIRM_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class ModernPeer(Protocol):
    """What a transport offers a modern request: request-scoped and listen-stream messages."""

    # Set when the transport ends gracefully: open listen streams end with their final result.
    ending: trio.Event

    def notify_nowait(self, method: str, params: dict[str, Any]) -> None: ...

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Ordered and reliable (listen streams): waits while the client is slow."""


class ModernRouter:
    def __init__(self, settings: Callable[[], Settings], surface: Surface, tools_changed: Changes,
                 instructions: str, call_context: Callable[..., CallContext],
                 sealer: mrtr.Sealer | None = None) -> None:
        self._settings = settings
        self._surface = surface
        self._changes = tools_changed
        self._instructions = instructions
        self._call_context = call_context
        self._sealer = sealer or mrtr.Sealer()
        self.listening = 0

    async def handle(self, request: Request, peer: ModernPeer | None) -> dict[str, Any]:
        env = modern.envelope(request.params)
        method = request.method
        if method == "server/discover":
            result = modern.discover_result(SERVER_CAPABILITIES, self._instructions)
        elif method == "tools/list":
            if request.params.get("cursor") is not None:
                raise ProtocolError(INVALID_PARAMS, "Invalid params: unknown cursor")
            result = {"tools": self._surface.list_tools()}
        elif (empty := empty_capability(method)) is not None:
            result = empty
        elif method == "tools/call":
            result = await self._call(request, env, peer)
        elif method == "subscriptions/listen":
            result = await self._listen(request, peer)
        else:
            raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {method}")
        settings = self._settings()
        return modern.complete(result, method, {"name": settings.server_name,
                                                "version": settings.server_version})

    # --- tools/call and MRTR ------------------------------------------------------------------

    async def _call(self, request: Request, env: modern.Envelope, peer: ModernPeer | None) -> dict[str, Any]:
        params = request.params
        name = params.get("name")
        if not isinstance(name, str) or not name:
            raise ProtocolError(INVALID_PARAMS, 'Invalid params: "name" must be a non-empty string')
        responses = params.get("inputResponses", {})
        if not isinstance(responses, dict):
            raise ProtocolError(INVALID_PARAMS, 'Invalid params: "inputResponses" must be an object')
        binding = mrtr.binding(request.method, params)
        token = params.get("requestState")
        state = self._sealer.open(token, binding) if token is not None else None
        approved = set(state.approved if state else ())
        resume = None
        if state is not None and (state.upstream_state is not None or state.parked is not None):
            answers = {k: v for k, v in responses.items() if not k.startswith(CONFIRM_PREFIX)}
            resume = Resume(answers, state.upstream_state, state.parked)
        # Answers count only for the questions our sealed state says were asked: without a
        # requestState (or for another question) the gate asks again.
        asked = frozenset(state.asked if state else ())
        ctx = self._call_context(request, peer, env=env, resume=resume,
                                 ask_user=self._asker(env, responses, approved, asked))
        try:
            outcome = await self._surface.call(name, params.get("arguments") or {}, ctx)
        except InputRequired as exc:
            questions = [key[len(CONFIRM_PREFIX):] for key in exc.requests if key.startswith(CONFIRM_PREFIX)]
            try:
                sealed = self._sealer.seal(binding, approved=sorted(approved), asked=questions,
                                           upstream_state=exc.upstream_state, parked=exc.parked)
            except ValueError:  # an upstream's own state too large to carry inside ours
                return ToolResult.failure(f"{name!r} needs input, but its upstream's requestState is "
                                          "too large to carry").to_wire()
            return {"resultType": "input_required", "inputRequests": exc.requests, "requestState": sealed}
        return outcome.to_wire()

    @staticmethod
    def _asker(env: modern.Envelope, responses: Mapping[str, Any], approved: set[str],
               asked: frozenset[str]) -> AskUser | None:
        """The gate's `ask` for a modern client: answered from this retry's inputResponses (to a
        question the last round asked) or an earlier round's approval; otherwise the call ends
        with the question (input_required)."""
        if not env.declared("elicitation"):
            return None  # the gate uses gate.askFallback

        async def ask(message: str) -> bool:
            digest = mrtr.question_digest(message)
            if digest in approved:
                return True
            answer = responses.get(CONFIRM_PREFIX + digest) if digest in asked else None
            if isinstance(answer, Mapping):
                accepted = answer.get("action") == "accept"
                if accepted:
                    approved.add(digest)
                return accepted
            raise InputRequired({CONFIRM_PREFIX + digest: {
                "method": "elicitation/create",
                "params": {"mode": "form", "message": message, "requestedSchema": CONFIRM_SCHEMA}}})

        return ask

    # --- subscriptions/listen -----------------------------------------------------------------

    async def _listen(self, request: Request, peer: ModernPeer | None) -> dict[str, Any]:
        wanted = request.params.get("notifications", {})
        if not isinstance(wanted, dict):
            raise ProtocolError(INVALID_PARAMS, 'Invalid params: "notifications" must be an object')
        if peer is None:
            raise ProtocolError(METHOD_NOT_FOUND, "Method not found: subscriptions/listen needs a stream")
        if self.listening >= MAX_LISTEN_STREAMS:
            raise ProtocolError(INTERNAL_ERROR, f"too many listen streams (at most {MAX_LISTEN_STREAMS})")
        # Only tool list changes exist here (no prompts or resources are served).
        honoured = {"toolsListChanged": True} if wanted.get("toolsListChanged") is True else {}
        tag = {modern.SUBSCRIPTION_ID_META: request.id}
        self.listening += 1
        try:
            await peer.notify("notifications/subscriptions/acknowledged",
                              {"_meta": tag, "notifications": honoured})
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_cancel_on, peer.ending, nursery.cancel_scope)
                seen = self._changes.version
                while True:
                    seen = await self._changes.next_burst(seen)
                    if honoured:
                        await peer.notify("notifications/tools/list_changed", {"_meta": tag})
        finally:
            self.listening -= 1
        log.info("listen stream ended by the server", id=request.id)
        return {"_meta": tag}  # the graceful end (PROTOCOL.md §3.10)


async def _cancel_on(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
