"""The client side of one upstream connection, sans-IO: messages in, events out; requests out.

Framing is the transport's (`upstream/transport.py`): what comes in here is one whole message,
or the framing's marker for one over the size cap.

Request ids are ours (integers, unique per connection), so ids from different clients never
collide upstream and a late answer to a cancelled request is recognised and dropped. Error
contract: `feed` never raises on what the upstream sends; bad input becomes an event.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfunnel.protocol import jsonrpc
from tfunnel.protocol.eras import LATEST_LEGACY
from tfunnel.protocol.framing import Oversize, sniff_top_level
from tfunnel.protocol.jsonrpc import MessageError, Notification, Request, Response


@dataclass(frozen=True)
class Garbage:
    """A message that is not JSON-RPC (logged and skipped)."""

    line: bytes
    error: str


@dataclass(frozen=True)
class BrokenAnswer:
    """A message that fails to decode as a valid answer but names the request it answers (an `id`
    readable at its top level, no `method`): nested too deeply, not JSON after the id, `result`
    not an object, both or neither of `result` and `error`, a bad `error`. `error` is our
    decoder's reason, never the line."""

    request_id: jsonrpc.RequestId
    error: str


@dataclass(frozen=True)
class OversizeResponse:
    """A message over the cap; `request_id` is the request it probably answered (or None)."""

    request_id: jsonrpc.RequestId | None
    size_at_least: int


Event = Response | Request | Notification | Garbage | BrokenAnswer | OversizeResponse


class ClientCore:
    def __init__(self) -> None:
        self._next_id = 0

    def new_id(self) -> int:
        """A request id never used before on this connection."""
        self._next_id += 1
        return self._next_id

    def issued(self, request_id: jsonrpc.RequestId) -> bool:
        """Whether `request_id` is one `new_id` handed out (an answer to it may be late, not
        unknown)."""
        return isinstance(request_id, int) and 0 < request_id <= self._next_id

    def feed(self, item: bytes | Oversize) -> Event:
        """One received message as an event; never raises."""
        if isinstance(item, Oversize):
            # Its first bytes, read like a broken answer's: only a top-level id of a line that is
            # no request names the call it fails (never an id nested in its result).
            top = sniff_top_level(item.head)
            return OversizeResponse(None if top.has_method else top.id, item.size_at_least)
        return decode_line(item)


def decode_line(line: bytes) -> Response | Request | Notification | Garbage | BrokenAnswer:
    """One upstream line as an event; never raises. A line that does not decode is a
    `BrokenAnswer` when the request it answers can still be read from it, else `Garbage`."""
    try:
        return jsonrpc.decode(line)
    except MessageError as exc:
        top = sniff_top_level(line)
        if top.id is not None and not top.has_method:
            return BrokenAnswer(top.id, exc.message)
        return Garbage(line[:200], exc.message)


# What we declare in the legacy handshake: elicitation, which a call's caller answers or we
# decline (sampling and roots requests are still routed to a caller, or answered by default).
LEGACY_CLIENT_CAPABILITIES: dict[str, Any] = {"elicitation": {}}


def initialize_params(client_name: str, client_version: str,
                      capabilities: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What we offer in the legacy handshake: the newest legacy version, elicitation (or, for a
    client a stdio wrap mirrors, that client's own `capabilities`)."""
    offered = LEGACY_CLIENT_CAPABILITIES if capabilities is None else capabilities
    return {"protocolVersion": LATEST_LEGACY,
            "capabilities": copy.deepcopy(dict(offered)),
            "clientInfo": {"name": client_name, "version": client_version}}


def encode_request(request_id: int, method: str, params: dict[str, Any]) -> bytes:
    return jsonrpc.encode(jsonrpc.request_message(request_id, method, params))


def encode_notification(method: str, params: dict[str, Any] | None = None) -> bytes:
    return jsonrpc.encode(jsonrpc.notification_message(method, params))


def encode_response(request_id: jsonrpc.RequestId, result: dict[str, Any]) -> bytes:
    return jsonrpc.encode(jsonrpc.result_message(request_id, result))


def encode_error(request_id: jsonrpc.RequestId, code: int, message: str) -> bytes:
    return jsonrpc.encode(jsonrpc.error_message(request_id, code, message))
