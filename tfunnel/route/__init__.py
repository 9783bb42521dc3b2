"""Routing: which era a request belongs to, and which handler answers it (see docs/architecture.md)."""

from tfunnel.route.router import Peer, Router

__all__ = ["Peer", "Router"]
