"""Prompts, resources and completion: the upstreams' lists under the surface's names, and the
requests that read them (`prompts/get`, `resources/read`, `completion/complete`).

Lists come from the catalog (`surface.catalog`), paged (`surface.pages`). A read is routed to its
upstream with the upstream's own name or URI, and passes PreToolUse first (`gate.gated.admit`),
with `tool_name` `prompt:<surfaced name>` or `resource:<uri>`: a deny means the upstream never
saw the request. Errors are JSON-RPC errors (`ProtocolError`), era-neutral: a resource that does
not exist is -32002 here, which the modern adapter answers as -32602; its `data.uri` is the URI
the client asked for, also when the upstream is the one that has no such resource.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from tfunnel.errors import GateDenied, ProtocolError, UpstreamError, UpstreamRemoteError
from tfunnel.gate.gated import AskUser, Gate, NeedsInput, ToolCall, admit
from tfunnel.observe.audit import AuditLog
from tfunnel.protocol.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    POLICY_DENIED,
    RESOURCE_NOT_FOUND,
)
from tfunnel.protocol.meta import own_keys
from tfunnel.surface import pages
from tfunnel.surface.catalog import Catalog
from tfunnel.surface.notices import Notices, via
from tfunnel.surface.profiles import Chosen
from tfunnel.surface.upstream_items import Route, held_template

log = structlog.get_logger("tfunnel.surface")

# Error codes an upstream's answer keeps; any other in the reserved range (-32768..-32000) is
# answered -32603, so an upstream cannot make us send a code whose meaning we do not mean.
_KEPT_CODES = frozenset({INVALID_PARAMS, INTERNAL_ERROR, RESOURCE_NOT_FOUND})
_EMPTY_COMPLETION: dict[str, Any] = {"completion": {"values": [], "hasMore": False}}


class UpstreamRequests(Protocol):
    async def request(self, upstream_id: str, method: str, params: dict[str, Any], *,
                      log_level: str | None = None,
                      on_progress: Callable[[dict[str, Any]], None] | None = None,
                      legacy_client: bool = False) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Reader:
    """Who reads: the session and request (for hooks and the audit log), how the gate may ask
    them, their `_meta` to forward (protocol keys removed) and their log level (modern)."""

    session_id: str = ""
    call_id: str = ""
    ask_user: AskUser | None = None
    meta: Mapping[str, Any] | None = None
    log_level: str | None = None
    # A modern reader's request stream, for the upstream's log messages while the read runs
    # (a legacy session hears them on its own stream, `surface.notices`).
    notify: Callable[[str, dict[str, Any]], None] | None = None
    # Relays an upstream's progress on the read, when the reader gave a token and can be told.
    progress: Callable[[dict[str, Any]], None] | None = None
    # A modern reader answers a wrapped upstream's `input_required` on its retry (MRTR): then
    # `modern`, and on the retry what goes back to the upstream (its answers, its own state).
    modern: bool = False
    continuation: Mapping[str, Any] | None = None
    # The reader's profile (`surface.profiles.choose`); None: the whole surface.
    profile: Chosen | None = None


def upstream_error(code: int, message: str) -> ProtocolError:
    """An upstream's error answer as ours (pure): its code when it means what we would mean."""
    reserved = -32768 <= code <= -32000
    return ProtocolError(code if code in _KEPT_CODES or not reserved else INTERNAL_ERROR, message)


class Reads:
    def __init__(self, catalog: Callable[[], Catalog], gate: Callable[[], Gate],
                 upstreams: UpstreamRequests, audit: AuditLog, notices: Notices | None = None) -> None:
        self._notices = notices or Notices()
        self._catalog = catalog
        self._gate = gate
        self._upstreams = upstreams
        self._audit = audit

    # --- lists ---------------------------------------------------------------------------------

    def list_prompts(self, cursor: Any, profile: Chosen | None = None) -> dict[str, Any]:
        return _paged("prompts", [p.listed() for p in self._catalog().view(profile).prompts()], cursor)

    def list_resources(self, cursor: Any, profile: Chosen | None = None) -> dict[str, Any]:
        return _paged("resources", [r.listed() for r in self._catalog().view(profile).resources()], cursor)

    def list_templates(self, cursor: Any, profile: Chosen | None = None) -> dict[str, Any]:
        return _paged("resourceTemplates", [t.listed() for t in self._catalog().view(profile).templates()],
                      cursor)

    def _view(self, reader: Reader) -> Catalog:
        return self._catalog().view(reader.profile)

    # --- reads ---------------------------------------------------------------------------------

    async def get_prompt(self, params: Mapping[str, Any], reader: Reader) -> dict[str, Any] | NeedsInput:
        name = params.get("name")
        if not isinstance(name, str) or not name:
            raise ProtocolError(INVALID_PARAMS, 'Invalid params: "name" must be a non-empty string')
        arguments = params.get("arguments") or {}
        _check_arguments(arguments)
        found = self._view(reader).prompt(name)
        if isinstance(found, str):
            raise ProtocolError(INVALID_PARAMS, f"Invalid params: {found}")
        if found.hold is not None:  # waits for approval: the upstream is not asked
            self._refused(found.gate_name, found.upstream, reader)
            raise ProtocolError(POLICY_DENIED, found.hold)
        call = ToolCall(surfaced=found.gate_name, tool_id=found.gate_name, display=found.title,
                        args=arguments, mode="prompt", session_id=reader.session_id,
                        call_id=reader.call_id, ask_user=reader.ask_user)
        allowed = await self._admit(call)
        if isinstance(allowed, NeedsInput):
            return allowed
        if allowed is not arguments:
            _check_arguments(allowed)
        return await self._forward(found.upstream, "prompts/get",
                                   {**self._continuation(params, reader), "name": found.name,
                                    "arguments": dict(allowed)}, reader, call)

    async def read_resource(self, params: Mapping[str, Any], reader: Reader) -> dict[str, Any] | NeedsInput:
        uri = params.get("uri")
        if not isinstance(uri, str) or not uri:
            raise ProtocolError(INVALID_PARAMS, 'Invalid params: "uri" must be a non-empty string')
        target = self._route(uri, reader)
        self._refuse_held(target, uri, reader)
        call = ToolCall(surfaced=target.gate_name, tool_id=target.gate_name, display=uri,
                        args={"uri": uri}, mode="resource", session_id=reader.session_id,
                        call_id=reader.call_id, ask_user=reader.ask_user)
        allowed = await self._admit(call)
        if isinstance(allowed, NeedsInput):
            return allowed
        if allowed is not call.args:  # a hook rewrote the URI: it is routed (and allowed) as written
            rewritten = allowed.get("uri")
            if not isinstance(rewritten, str) or not rewritten:
                raise ProtocolError(INVALID_PARAMS, "Invalid params: a PreToolUse hook rewrote the "
                                    "resource URI to something that is not a URI")
            target = self._route(rewritten, reader)
            self._refuse_held(target, uri, reader)
        try:
            return await self._forward(target.upstream, "resources/read",
                                       {**self._continuation(params, reader), "uri": target.original},
                                       reader, call)
        except ProtocolError as exc:
            if exc.code not in (RESOURCE_NOT_FOUND, INVALID_PARAMS) or self._catalog().wrap is not None:
                raise
            # The upstream's not-found (its `data` is not relayed, and would name the upstream's
            # URI) names the URI the client asked for, as ours does (SEP-2164 `data.uri`).
            raise ProtocolError(exc.code, exc.message, {"uri": uri}) from None

    async def complete(self, params: Mapping[str, Any], reader: Reader) -> dict[str, Any] | NeedsInput:
        ref = params.get("ref")
        argument = params.get("argument")
        if not isinstance(ref, Mapping) or not isinstance(argument, Mapping):
            raise ProtocolError(INVALID_PARAMS, 'Invalid params: "ref" and "argument" must be objects')
        kind = ref.get("type")
        upstream_ref: dict[str, Any]
        if kind == "ref/prompt" and isinstance(ref.get("name"), str):
            found = self._view(reader).prompt(ref["name"])
            if isinstance(found, str):
                raise ProtocolError(INVALID_PARAMS, f"Invalid params: {found}")
            if found.hold is not None:
                self._refused(found.gate_name, found.upstream, reader)
                raise ProtocolError(POLICY_DENIED, found.hold)
            upstream, upstream_ref = found.upstream, {"type": kind, "name": found.name}
        elif kind == "ref/resource" and isinstance(ref.get("uri"), str):
            target = self._route(ref["uri"], reader)
            self._refuse_held(target, ref["uri"], reader)
            upstream, upstream_ref = target.upstream, {"type": kind, "uri": _upstream_uri(target)}
        else:
            raise ProtocolError(INVALID_PARAMS, 'Invalid params: "ref" must be {"type": "ref/prompt", '
                                '"name": ...} or {"type": "ref/resource", "uri": ...}')
        forwarded: dict[str, Any] = {"ref": upstream_ref, "argument": dict(argument)}
        if isinstance(params.get("context"), Mapping):
            forwarded["context"] = dict(params["context"])
        try:
            return await self._forward(upstream, "completion/complete", forwarded, reader, None)
        except ProtocolError as exc:
            if exc.code == METHOD_NOT_FOUND and self._catalog().wrap is None:
                return dict(_EMPTY_COMPLETION)  # an upstream without completion: nothing to offer
            raise

    def _continuation(self, params: Mapping[str, Any], reader: Reader) -> dict[str, Any]:
        """Under a wrap, a modern reader's retry of a read its upstream answered `input_required`:
        the answers and the upstream's own state go back to it as they came."""
        if not reader.modern or reader.continuation is None or self._catalog().wrap is None:
            return {}
        return dict(reader.continuation)

    def wrapped(self) -> str | None:
        """The wrapped upstream's id, under a wrap."""
        wrap = self._catalog().wrap
        return wrap.upstream if wrap is not None else None

    async def forward(self, method: str, params: Mapping[str, Any],
                      reader: Reader) -> dict[str, Any] | NeedsInput:
        """Under a wrap: a request tfunnel has no meaning for, sent to the wrapped upstream as
        it came (the protocol's own `_meta` keys excepted) and answered as the upstream answers."""
        upstream = self.wrapped()
        if upstream is None or (reader.profile is not None and not reader.profile.profile.unrestricted):
            # A restricted profile cannot reach what tfunnel cannot see into.
            raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {method}")
        # An MRTR retry's answers and state are ours to open: the upstream gets its own back.
        forwarded = {k: v for k, v in params.items() if k not in ("_meta", "inputResponses", "requestState")}
        self._audit.record("forward", method=method, upstream=upstream, session=reader.session_id)
        return await self._forward(upstream, method, {**forwarded, **self._continuation(params, reader)},
                                   reader, None)

    # --- the parts -----------------------------------------------------------------------------

    def _refuse_held(self, target: Route, uri: str, reader: Reader) -> None:
        """A read (or completion) that would go through a held template is refused before
        anything runs, however the URI was written."""
        held = held_template(target, self._catalog().extras)
        if held is not None and held.hold is not None:
            self._refused(held.gate_name, held.upstream, reader)
            raise ProtocolError(POLICY_DENIED, held.hold, {"uri": uri})

    def _refused(self, name: str, upstream: str, reader: Reader) -> None:
        self._audit.record("approval", event="refused", name=name, upstream=upstream,
                           session=reader.session_id)

    def _route(self, uri: str, reader: Reader) -> Route:
        found = self._view(reader).resource(uri)
        if isinstance(found, str):
            raise ProtocolError(RESOURCE_NOT_FOUND, f"Resource not found: {found}", {"uri": uri})
        return found

    async def _admit(self, call: ToolCall) -> Mapping[str, Any] | NeedsInput:
        """The arguments PreToolUse allows (perhaps rewritten), or its question to the client
        (a modern client's MRTR round); a deny is -32010."""
        try:
            decision = await admit(self._gate(), call)
        except GateDenied as exc:
            log.info("read denied", name=call.surfaced, reason=exc.reason, internal=exc.internal)
            self._audit.record("tool", name=call.surfaced, mode=call.mode, ok=False, denied=True,
                               session=call.session_id)
            raise ProtocolError(POLICY_DENIED, str(exc)) from None
        if isinstance(decision, NeedsInput):
            return decision
        return decision.updated_input if decision.updated_input is not None else call.args

    async def _forward(self, upstream: str, method: str, params: dict[str, Any], reader: Reader,
                       call: ToolCall | None) -> dict[str, Any] | NeedsInput:
        if reader.meta:
            params["_meta"] = dict(reader.meta)
        started = time.monotonic()
        ok = False
        push = via(reader.notify) if reader.notify is not None else None
        try:
            with self._notices.during(upstream, reader.log_level, push):
                result = await self._upstreams.request(upstream, method, params, log_level=reader.log_level,
                                                       on_progress=reader.progress,
                                                       legacy_client=not reader.modern)
            kind = result.get("resultType", "complete")
            if kind == "input_required" and reader.modern and self._catalog().wrap is not None:
                ok = True  # the wrapped upstream's question is the client's, as it asked it
                return _questions(upstream, result)
            if kind != "complete":
                raise ProtocolError(INTERNAL_ERROR, f"upstream {upstream!r} asked for input on {method}; "
                                    "tfunnel relays that for tools/call only")
            ok = True
            return _own_meta(result)
        except UpstreamRemoteError as exc:
            if self._catalog().wrap is not None:  # the wrapped upstream's answer is the client's
                raise ProtocolError(exc.code, exc.remote_message, exc.data) from None
            raise upstream_error(exc.code, f"upstream {upstream!r}: {exc.remote_message}") from None
        except UpstreamError as exc:
            raise ProtocolError(INTERNAL_ERROR, str(exc)) from None
        finally:
            if call is not None and self._audit.enabled:
                self._audit.record("tool", name=call.surfaced, mode=call.mode, ok=ok,
                                   durationMs=round((time.monotonic() - started) * 1000, 1),
                                   session=call.session_id, args=self._audit.redact(dict(call.args)))


def _questions(upstream: str, result: Mapping[str, Any]) -> NeedsInput:
    """A wrapped upstream's `input_required` answer to a read, for its modern client (its own
    requestState is sealed inside ours by the era adapter, and goes back to it on the retry)."""
    requests, state = result.get("inputRequests"), result.get("requestState")
    if not isinstance(requests, Mapping) or not requests or not (state is None or isinstance(state, str)):
        raise ProtocolError(INTERNAL_ERROR, f"upstream {upstream!r} answered input_required without "
                            "valid inputRequests")
    return NeedsInput(dict(requests), upstream_state=state or "")


def _paged(key: str, items: list[dict[str, Any]], cursor: Any) -> dict[str, Any]:
    shown, following = pages.page(key, items, cursor)
    result: dict[str, Any] = {key: shown}
    if following is not None:
        result["nextCursor"] = following
    return result


def _check_arguments(arguments: Any) -> None:
    if not isinstance(arguments, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in arguments.items()):
        raise ProtocolError(INVALID_PARAMS, 'Invalid params: prompt "arguments" must map names to strings')


def _upstream_uri(target: Route) -> str:
    """The URI (or, for a template, the uriTemplate) the upstream knows the target by."""
    return target.item.original if target.item is not None else target.original


def _own_meta(result: dict[str, Any]) -> dict[str, Any]:
    """An upstream's result without the protocol's `_meta` keys (ours go on at our hop)."""
    meta = result.get("_meta")
    if meta is None:
        return result
    kept = own_keys(meta)
    out = {k: v for k, v in result.items() if k != "_meta"}
    if kept:
        out["_meta"] = kept
    return out
