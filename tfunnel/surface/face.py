"""Who the server is to a client: its `serverInfo`, capabilities and instructions (pure).

In funnel mode that is tfunnel itself. Under a wrap (`tfunnel wrap`) it is the wrapped upstream,
as its last handshake in this process showed it: a client of either era meets the upstream's own
identity, and a method the upstream did not declare is refused as the upstream itself would.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tfunnel.config.model import Settings
from tfunnel.errors import ProtocolError
from tfunnel.protocol.jsonrpc import INTERNAL_ERROR, METHOD_NOT_FOUND
from tfunnel.protocol.session import SERVER_CAPABILITIES
from tfunnel.surface.profiles import Chosen

# The capability a server must declare to be asked each method (what the wrapped upstream did
# not declare, it is not asked). `tools/*` and `ping` are always answered.
NEEDS: Mapping[str, tuple[str, ...]] = {
    "prompts/list": ("prompts",), "prompts/get": ("prompts",),
    "resources/list": ("resources",), "resources/read": ("resources",),
    "resources/templates/list": ("resources",),
    "resources/subscribe": ("resources", "subscribe"), "resources/unsubscribe": ("resources", "subscribe"),
    "completion/complete": ("completions",), "logging/setLevel": ("logging",),
}


# What a wrapped upstream may declare that tfunnel does not carry to it (task-augmented calls and
# their methods): not shown, so no client relies on it.
UNCARRIED = ("tasks",)


@dataclass(frozen=True)
class Face:
    server_info: Mapping[str, Any]
    capabilities: Mapping[str, Any]
    # The instructions, composed only when asked (`initialize`, `server/discover`).
    compose: Callable[[], str] = field(default=lambda: "", compare=False, repr=False)
    # The wrapped upstream's id; None: tfunnel's own face.
    wrapped: str | None = None
    # The instructions a client of a profile gets (tfunnel's: the sections of the upstreams the
    # profile allows); None: `compose`'s for every client.
    compose_for: Callable[[Chosen], str] | None = field(default=None, compare=False, repr=False)

    @property
    def instructions(self) -> str:
        return self.compose()

    def instructions_for(self, chosen: Chosen | None) -> str:
        """The instructions a client with profile `chosen` gets."""
        if chosen is None or self.compose_for is None:
            return self.compose()
        return self.compose_for(chosen)

    def capabilities_copy(self) -> dict[str, Any]:
        """The capabilities to put in a result (a copy: a client's answer never shares ours)."""
        return copy.deepcopy(dict(self.capabilities))

    def refuse_undeclared(self, method: str) -> None:
        """Under a wrap: -32601 for a method whose capability the upstream did not declare."""
        if self.wrapped is None or method not in NEEDS:
            return
        if not declares(self.capabilities, NEEDS[method]):
            raise ProtocolError(METHOD_NOT_FOUND, f"Method not found: {method}")


def declares(capabilities: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    """Whether `capabilities` holds `path`: an object for a capability, `true` for a flag in it."""
    capability = capabilities.get(path[0])
    if not isinstance(capability, Mapping):
        return False
    return all(capability.get(flag) is True for flag in path[1:])


def unknown_identity(upstream: str) -> ProtocolError:
    """What a client is told while the wrapped upstream has never connected in this process:
    there is no identity to show, and tfunnel's own would be a lie."""
    return ProtocolError(INTERNAL_ERROR, f"request failed: the wrapped upstream {upstream!r} has not "
                         "connected yet; try again once it is up")


def funnel_face(settings: Settings, instructions: Callable[[], str],
                instructions_for: Callable[[Chosen], str] | None = None) -> Face:
    """tfunnel's own face: its configured name and version, its capabilities, `instructions`
    (per profile: `instructions_for`)."""
    return Face({"name": settings.server_name, "version": settings.server_version}, SERVER_CAPABILITIES,
                instructions, compose_for=instructions_for)
