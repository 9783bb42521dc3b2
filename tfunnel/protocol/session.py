"""Per-connection state of a legacy client session and the `initialize` exchange (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfunnel.errors import ProtocolError
from tfunnel.protocol.eras import negotiate_legacy
from tfunnel.protocol.jsonrpc import INVALID_PARAMS

# Prompts and resources are declared and listed empty: a gateway of tools has none yet, and an
# empty list (cacheable in the modern era) says so better than "method not found".
SERVER_CAPABILITIES: Mapping[str, Any] = {"tools": {"listChanged": True}, "prompts": {}, "resources": {}}
# The list methods of the declared-but-empty capabilities, and the key of each list.
EMPTY_LISTS: Mapping[str, str] = {"prompts/list": "prompts", "resources/list": "resources",
                                  "resources/templates/list": "resourceTemplates"}
# What a client that cannot be asked answers a server's request: an elicitation is declined,
# roots are none (any other request has no such answer).
DECLINED: Mapping[str, Mapping[str, Any]] = {"elicitation/create": {"action": "decline"},
                                              "roots/list": {"roots": []}}


def empty_capability(method: str) -> dict[str, Any] | None:
    """The answer for the declared-but-empty prompts and resources: an empty list, or -32602 for
    a prompt or resource by name (none exists); None for any other method."""
    if method in EMPTY_LISTS:
        return {EMPTY_LISTS[method]: []}
    if method in ("prompts/get", "resources/read"):
        raise ProtocolError(INVALID_PARAMS, f"Invalid params: no such {method.split('/')[0][:-1]}")
    return None


@dataclass
class ClientSession:
    """What one client told us in `initialize`; owned by its transport connection."""

    id: str
    protocol_version: str | None = None
    client_info: dict[str, Any] = field(default_factory=dict)
    capabilities: dict[str, Any] = field(default_factory=dict)
    initialized: bool = False

    @property
    def label(self) -> str:
        name = self.client_info.get("name", "?")
        return f"{name}/{self.client_info.get('version', '?')}"


def initialize(session: ClientSession, params: Mapping[str, Any], server_info: Mapping[str, Any],
               instructions: str) -> dict[str, Any]:
    """Record the client's offer on `session` and build the `InitializeResult`."""
    capabilities = params.get("capabilities", {})
    client_info = params.get("clientInfo", {})
    if not isinstance(capabilities, dict):
        raise ProtocolError(INVALID_PARAMS, 'Invalid params: "capabilities" must be an object')
    if not isinstance(client_info, dict):
        raise ProtocolError(INVALID_PARAMS, 'Invalid params: "clientInfo" must be an object')
    session.protocol_version = negotiate_legacy(params.get("protocolVersion"))
    session.capabilities = capabilities
    session.client_info = client_info
    result: dict[str, Any] = {
        "protocolVersion": session.protocol_version,
        "capabilities": {key: dict(value) for key, value in SERVER_CAPABILITIES.items()},
        "serverInfo": dict(server_info),
    }
    if instructions:
        result["instructions"] = instructions
    return result
