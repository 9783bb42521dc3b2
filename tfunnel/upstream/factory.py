"""Which transport an upstream connects with: one line per transport this version has.

The HTTP and WebSocket transports are imported when an upstream first needs one: their libraries
(httpx2, trio-websocket with wsproto and h11) are a fifth of a stdio gateway's start-up imports
and memory, and most homes have only stdio upstreams."""

from __future__ import annotations

from tfunnel.config.expose import AVAILABLE_TRANSPORTS, UpstreamSpec
from tfunnel.upstream.states import Context
from tfunnel.upstream.stdio import StdioTransport
from tfunnel.upstream.transport import SpawnFailed, UpstreamTransport


def transport_for(spec: UpstreamSpec, ctx: Context) -> UpstreamTransport:
    """The transport one incarnation of `spec` connects with. Raises a final `SpawnFailed` for a
    transport this version cannot start: valid config, so it is refused at start, not at load,
    and only a config change heals it."""
    if spec.transport not in AVAILABLE_TRANSPORTS:
        raise SpawnFailed(f"upstream {spec.id!r}: transport {spec.transport!r} is not available "
                          f"in this version (available: {', '.join(AVAILABLE_TRANSPORTS)})",
                          permanent=True, final=True)
    if spec.transport == "http":
        from tfunnel.upstream.http import HttpTransport

        return HttpTransport(spec, ctx)
    if spec.transport == "websocket":
        from tfunnel.upstream.websocket import WebSocketTransport

        return WebSocketTransport(spec, ctx)
    return StdioTransport(spec, ctx)
