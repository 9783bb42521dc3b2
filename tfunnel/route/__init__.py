"""Routing: which era a request belongs to (`eras`), one method table (`methods`), the two era
adapters (`legacy`, `modern`) and the era bridging of upstream calls (`channel`, `bridge`,
`parking`); see docs/architecture.md."""

from tfunnel.route.peer import Peer
from tfunnel.route.router import Router

__all__ = ["Peer", "Router"]
