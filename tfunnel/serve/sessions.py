"""Legacy Streamable HTTP sessions: minted by `initialize`, ended by DELETE or idleness."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import trio

from tfunnel.protocol import jsonrpc
from tfunnel.protocol.jsonrpc import Notification
from tfunnel.protocol.session import ClientSession
from tfunnel.router import Router
from tfunnel.serve.outbound import OutboundRequests

# A session nobody has used for this long is forgotten (its client must initialize again).
IDLE_EXPIRY_S = 30 * 60.0
# More live sessions than this is a misbehaving client, not a desktop app.
MAX_SESSIONS = 256


@dataclass
class HttpSession:
    client: ClientSession
    last_seen: float
    inflight: dict[jsonrpc.RequestId, trio.CancelScope] = field(default_factory=dict)
    streams: int = 0  # open GET notification streams
    closed: trio.Event = field(default_factory=trio.Event)
    outbound: OutboundRequests = field(default_factory=OutboundRequests)  # requests to the client

    def cancel_all(self) -> None:
        for scope in self.inflight.values():
            scope.cancel()

    def notification(self, router: Router, note: Notification) -> None:
        """A client notification: a cancel targets this session's call; the rest go to the router."""
        if note.method == "notifications/cancelled":
            request_id = note.params.get("requestId")
            scope = self.inflight.get(request_id) if isinstance(request_id, str | int) else None
            if scope is not None:
                scope.cancel()
            return
        router.notify(self.client, note)


class SessionStore:
    def __init__(self, idle_expiry_s: float = IDLE_EXPIRY_S, max_sessions: int = MAX_SESSIONS) -> None:
        self._sessions: dict[str, HttpSession] = {}
        self.idle_expiry_s = idle_expiry_s
        self.max_sessions = max_sessions

    def __len__(self) -> int:
        return len(self._sessions)

    def streams(self) -> int:
        return sum(s.streams for s in self._sessions.values())

    def create(self) -> HttpSession | None:
        """A new session with a secure random id; None when the store is full."""
        self.expire()
        if len(self._sessions) >= self.max_sessions:
            return None
        session_id = secrets.token_urlsafe(32)  # visible ASCII, unguessable
        session = HttpSession(ClientSession(id=session_id), trio.current_time())
        self._sessions[session_id] = session
        return session

    def get(self, session_id: str) -> HttpSession | None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.last_seen = trio.current_time()
        return session

    def remove(self, session_id: str) -> HttpSession | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.cancel_all()
            session.closed.set()
        return session

    def expire(self) -> list[HttpSession]:
        """Forget sessions idle for longer than the expiry (none with a call or stream open)."""
        now = trio.current_time()
        stale = [sid for sid, s in self._sessions.items()
                 if now - s.last_seen > self.idle_expiry_s and not s.inflight and not s.streams]
        return [s for s in (self.remove(sid) for sid in stale) if s is not None]

    def close_all(self) -> None:
        for session_id in list(self._sessions):
            self.remove(session_id)
