"""Legacy Streamable HTTP sessions: minted by `initialize`, ended by DELETE, idleness or eviction.

Behind a proxy that spreads requests over several instances, a session must come back to the
instance that minted it: `serve --http --instance NAME` starts each id this instance mints with
`NAME.` (`session_id`), which the proxy maps to that instance (`conf/nginx/tfunnel.conf`).

The store forgets sessions synchronously (so a forgotten id gets 404 at once) and hands each one it
forgot on its own (expired, evicted) to `run_ends`, which ends it as DELETE does: its calls are
already cancelled; its Stop hooks run and its end is audited.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog
import trio

from tfunnel.protocol import jsonrpc
from tfunnel.protocol.session import INSTANCE_NAME, NO_TOKEN, ClientSession, TokenFacts
from tfunnel.serve.connection import Connection

# A session nobody has used for this long is forgotten (its client must initialize again).
IDLE_EXPIRY_S = 30 * 60.0
# More live sessions than this is a misbehaving client, not a desktop app (`limits.maxSessions`).
MAX_SESSIONS = 256
# Forgotten sessions wait here for their end; when it is full, the `initialize` that evicts waits:
# backpressure on whoever causes the churn, never an unbounded pile of pending Stop hooks.
ENDING_QUEUE = 64
# Sessions ended at once (each may run Stop hooks, which can take up to their timeout).
ENDING_WORKERS = 4

log = structlog.get_logger("tfunnel.http")


def session_id(instance: str | None) -> str:
    """A new session id: unguessable visible ASCII (`token_urlsafe` has no "."), prefixed with
    `instance` and "." when this instance is one of several behind a proxy."""
    token = secrets.token_urlsafe(32)
    if instance is None:
        return token
    if not INSTANCE_NAME.fullmatch(instance):
        raise ValueError(f"an instance name is 1 to 32 of A-Z a-z 0-9 _ -, got {instance!r}")
    return f"{instance}.{token}"


@dataclass
class HttpSession:
    """A session as the store keeps it: its connection (the MCP state), when it was last used,
    its open GET streams, and `closed` (set once the store forgot it)."""

    connection: Connection
    last_seen: float
    streams: int = 0  # open GET notification streams (or the 2024 SSE stream)
    closed: trio.Event = field(default_factory=trio.Event)
    # Whose token minted it (`auth.gate.principal`; None with authentication off): only requests
    # with a token of that principal find it.
    principal: str | None = None

    @property
    def client(self) -> ClientSession:
        return self.connection.session

    @property
    def inflight(self) -> dict[jsonrpc.RequestId, trio.CancelScope]:
        return self.connection.inflight

    @property
    def busy(self) -> bool:
        """A call or a stream is open: the session is in use, whatever its last request."""
        return bool(self.inflight) or self.streams > 0


class SessionStore:
    def __init__(self, idle_expiry_s: float = IDLE_EXPIRY_S, max_sessions: int = MAX_SESSIONS, *,
                 instance: str | None = None) -> None:
        session_id(instance)  # a bad name fails here, not at the first initialize
        self.instance = instance
        self._sessions: dict[str, HttpSession] = {}  # in order of last use, least recent first
        self.idle_expiry_s = idle_expiry_s
        self.max_sessions = max_sessions
        self._ending, self._to_end = trio.open_memory_channel[HttpSession](ENDING_QUEUE)

    def __len__(self) -> int:
        return len(self._sessions)

    def streams(self) -> int:
        return sum(s.streams for s in self._sessions.values())

    async def create(self, connect: Callable[[ClientSession], Connection],
                     principal: str | None = None,
                     token: TokenFacts = NO_TOKEN) -> HttpSession | None:
        """A new session with a secure random id, its connection made by `connect`. Sessions
        idle past the expiry are forgotten first; when the store is still full, the least
        recently used idle session (no call or stream open) is evicted to make room (its client
        gets 404 and initializes again). None when every session is busy. Every session
        forgotten here goes to `run_ends`. `token`: the token's subject and scopes
        (`auth.gate.token_facts`), which choose the session's profile."""
        forgotten = self._forget_expired()
        if len(self._sessions) >= self.max_sessions:
            victim = next((s for s in self._sessions.values() if not s.busy), None)
            if victim is None:
                await self._hand_over(forgotten)
                return None
            log.info("session evicted: the session cap is reached", session=victim.client.id,
                     max_sessions=self.max_sessions)
            self.remove(victim.client.id)
            forgotten.append(victim)
        minted = session_id(self.instance)
        client = ClientSession(id=minted, token_subject=token[0], token_scopes=token[1])
        session = HttpSession(connect(client), trio.current_time(), principal=principal)
        self._sessions[minted] = session
        await self._hand_over(forgotten)
        return session

    def get(self, session_id: str, principal: str | None = None) -> HttpSession | None:
        """A live session of `principal`, now the most recently used; None if unknown, forgotten
        or another principal's (which is left untouched)."""
        session = self._sessions.get(session_id)
        if session is None or session.principal != principal:
            return None
        return self.touch(session_id)

    def touch(self, session_id: str) -> HttpSession | None:
        """Mark a session used now (a request arrived, or its call or stream just ended)."""
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.last_seen = trio.current_time()
            self._sessions[session_id] = session
        return session

    def remove(self, session_id: str) -> HttpSession | None:
        """Forget a session and cancel its calls; ending it (Stop hooks) is the caller's part."""
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.connection.cancel_all()
            session.closed.set()
        return session

    async def expire(self) -> None:
        """Forget sessions idle for longer than the expiry (none with a call or stream open) and
        hand them to `run_ends`."""
        await self._hand_over(self._forget_expired())

    def _forget_expired(self) -> list[HttpSession]:
        now = trio.current_time()
        stale = [sid for sid, s in self._sessions.items()
                 if now - s.last_seen > self.idle_expiry_s and not s.busy]
        for sid in stale:
            log.info("session expired", session=sid)
        return [s for s in (self.remove(sid) for sid in stale) if s is not None]

    async def _hand_over(self, sessions: list[HttpSession]) -> None:
        for session in sessions:
            await self._ending.send(session)

    async def run_ends(self, end: Callable[[ClientSession], Awaitable[None]]) -> None:
        """End every session the store forgets on its own (`end` runs its Stop hooks and audit
        record), `ENDING_WORKERS` at a time. Runs until cancelled."""
        async def worker(sessions: trio.MemoryReceiveChannel[HttpSession]) -> None:
            async for session in sessions:
                await end(session.client)

        async with trio.open_nursery() as nursery:
            for _ in range(ENDING_WORKERS):
                nursery.start_soon(worker, self._to_end.clone())

    def close_all(self) -> None:
        for session_id in list(self._sessions):
            self.remove(session_id)
