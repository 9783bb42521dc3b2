"""Per-connection state of a legacy client session and the `initialize` exchange (pure)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tfunnel.errors import ProtocolError
from tfunnel.protocol.eras import negotiate_legacy
from tfunnel.protocol.jsonrpc import INVALID_PARAMS

# What we serve: tools, and the prompts, resources and completion of the upstreams (lists that
# may be empty, which a client may still ask for and cache).
SERVER_CAPABILITIES: Mapping[str, Any] = {
    "tools": {"listChanged": True}, "prompts": {"listChanged": True},
    "resources": {"subscribe": True, "listChanged": True}, "completions": {}, "logging": {}}
# The client capabilities whose server→client requests tfunnel carries back to the client
# (elicitation/create, sampling/createMessage, roots/list): what a wrap may declare for it.
CARRIED_CLIENT_CAPABILITIES = ("elicitation", "sampling", "roots")
# What a client that cannot be asked answers a server's request: an elicitation is declined,
# roots are none (any other request has no such answer).
DECLINED: Mapping[str, Mapping[str, Any]] = {"elicitation/create": {"action": "decline"},
                                              "roots/list": {"roots": []}}


# An instance's name among several behind a proxy (`serve --http --instance`): it starts each
# session id the instance mints, so what a proxy's routing rule can match, and no more.
INSTANCE_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")

# What an HTTP bearer token says of its holder: its subject (`sub`) and scopes.
TokenFacts = tuple[str | None, frozenset[str]]
NO_TOKEN: TokenFacts = (None, frozenset())


@dataclass
class ClientSession:
    """What one client told us in `initialize`; owned by its transport connection."""

    id: str
    protocol_version: str | None = None
    client_info: dict[str, Any] = field(default_factory=dict)
    capabilities: dict[str, Any] = field(default_factory=dict)
    initialized: bool = False
    # `logging/setLevel`'s level (stamped on requests to modern upstreams), and where the
    # connection takes notifications nobody asked for in a request (its transport's stream).
    log_level: str | None = None
    push: Callable[[dict[str, Any]], None] | None = field(default=None, repr=False, compare=False)
    # What the HTTP bearer token says of its holder (authentication on): its `sub` and scopes.
    token_subject: str | None = None
    token_scopes: frozenset[str] = frozenset()

    @property
    def label(self) -> str:
        name = self.client_info.get("name", "?")
        return f"{name}/{self.client_info.get('version', '?')}"


def initialize(session: ClientSession, params: Mapping[str, Any], server_info: Mapping[str, Any],
               instructions: str, capabilities_offered: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Record the client's offer on `session` and build the `InitializeResult` (with our own
    capabilities, or `capabilities_offered`: a wrapped upstream's, already a copy)."""
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
        "capabilities": dict(capabilities_offered) if capabilities_offered is not None
        else {key: dict(value) for key, value in SERVER_CAPABILITIES.items()},
        "serverInfo": dict(server_info),
    }
    if instructions:
        result["instructions"] = instructions
    return result
