"""The per-request check of the HTTP service when authentication is on (`serve.http` calls it).

`screen` answers what it owns and lets the rest through: the Protected Resource Metadata documents
(RFC 9728, unauthenticated, GET or HEAD), and the refusals — a missing, malformed or bad token (401 or
400) or a missing scope (403), each with its `WWW-Authenticate` challenge. `/livez` and `/readyz`
are always open (an orchestrator's probes carry no token); `/health` and `/metrics` are open only
with `protectOperations: false`. Everything else (`/mcp`, `/sse`, `/messages`, unknown paths) needs
a valid token, and is screened before the HTTP app counts it, mints a session or routes it.

The token goes no further than this module: the app, the router and the upstreams never see HTTP
headers. The claims of a good token are left on the ASGI scope (`tfunnel.auth`), with its principal (a
session is bound to it: `principal_of`) and its expiry (a stream ends there: `stream_deadline`).
Each refusal is logged with its real reason and the peer address, counted by `on_deny` (the
metrics) and audited through `DenyLimiter` (the first 20 a minute, then a summary); none of them
ever gets the token. With no signing key ever loaded (the issuer has not answered yet) a request
with a token gets 503 and `Retry-After`, not a verdict on its token.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

import structlog
import trio

from tfunnel.auth import challenge
from tfunnel.auth.config import AuthConfig
from tfunnel.auth.denials import DenyLimiter
from tfunnel.auth.jwks import KeyCache
from tfunnel.auth.verify import TEMPORARILY_UNAVAILABLE, Verdict, bearer_token, scopes_of, verify
from tfunnel.protocol.session import TokenFacts

log = structlog.get_logger("tfunnel.auth")

ALWAYS_OPEN = frozenset({"/livez", "/readyz"})
OPERATIONS = frozenset({"/health", "/metrics"})
# The metadata changes only with the config file, which is read at start.
METADATA_CACHE = b"public, max-age=3600"
CLAIMS_KEY = "tfunnel.auth"
PRINCIPAL_KEY = "tfunnel.auth.principal"  # who the token is for (`principal`)
EXPIRES_KEY = "tfunnel.auth.expires"  # when it stops being good: exp + tolerance, epoch seconds
RETRY_AFTER_S = 5  # what a 503 says while no signing key was ever loaded
UNAVAILABLE = Verdict(503, TEMPORARILY_UNAVAILABLE, "the signing keys are not available yet; retry later",
                      "no signing key loaded yet (the issuer has not answered)")

Scope = MutableMapping[str, Any]
Send = Callable[[dict[str, Any]], Awaitable[None]]
OnDeny = Callable[[str, int, str], None]  # (error, status, path): every denial (the metrics)
Record = Callable[[dict[str, Any]], None]  # an audit record (denials aggregated by `DenyLimiter`)


def principal(claims: Mapping[str, Any]) -> str:
    """Who a token speaks for, as a session remembers it: a hash of (`iss`, `sub`); without a
    `sub`, of (`iss`, `client_id` or `azp`); without either, "anonymous"."""
    iss = claims.get("iss")
    for kind, name in (("sub", "sub"), ("client", "client_id"), ("client", "azp")):
        value = claims.get(name)
        if isinstance(value, str) and value:
            basis = json.dumps([kind, iss if isinstance(iss, str) else "", value])
            return hashlib.sha256(basis.encode()).hexdigest()[:32]
    return "anonymous"


def principal_of(scope: Mapping[str, Any]) -> str | None:
    """The principal of the request's token; None when authentication is off."""
    value = scope.get(PRINCIPAL_KEY)
    return value if isinstance(value, str) else None


def token_facts(scope: Mapping[str, Any]) -> TokenFacts:
    """The request's token's subject and scopes (for choosing a profile); (None, empty) when
    authentication is off."""
    claims = scope.get(CLAIMS_KEY)
    if not isinstance(claims, Mapping):
        return None, frozenset()
    subject = claims.get("sub")
    return (subject if isinstance(subject, str) and subject else None), scopes_of(claims)


def stream_deadline(scope: Mapping[str, Any]) -> float:
    """The trio deadline at which a stream opened by this request ends: its token's expiry
    (inf when authentication is off)."""
    expires = scope.get(EXPIRES_KEY)
    if not isinstance(expires, float):
        return math.inf
    return trio.current_time() + max(0.0, expires - time.time())


class AuthGate:
    """The resource server for one gateway: its config, its keys, where denials go."""

    def __init__(self, config: AuthConfig, keys: KeyCache, on_deny: OnDeny,
                 now: Callable[[], float] = time.time, record: Record = lambda _: None) -> None:
        self.config = config
        self.keys = keys
        self._on_deny = on_deny
        self._record = record
        self._now = now
        self.denials = DenyLimiter(trio.current_time)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The gate's own work, in the HTTP service's nursery: keeping the keys (`KeyCache.run`)
        and the per-minute denial summaries. Runs until cancelled."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.keys.run)
            task_status.started()
            while True:
                ends = self.denials.window_ends
                if ends is None:
                    await trio.sleep(self.denials.window_s)
                else:
                    await trio.sleep_until(ends)
                for document in self.denials.flush():
                    self._record(document)

    def is_open(self, path: str) -> bool:
        return path in ALWAYS_OPEN or (not self.config.protect_operations and path in OPERATIONS)

    async def screen(self, scope: Scope, send: Send) -> bool:
        """True when this answered the request (a metadata document or a refusal); False when it
        may go on (an open path, or a good token)."""
        path = scope["path"]
        if path in self.config.metadata_paths:
            await self._metadata(scope["method"], send)
            return True
        if self.is_open(path):
            return False
        values = [value.decode("latin-1") for name, value in scope["headers"]
                  if name.lower() == b"authorization"]
        token = bearer_token(values, scope.get("query_string", b"").decode("latin-1"))
        verdict = token if isinstance(token, Verdict) else await self.check(token)
        if verdict.ok:
            scope[CLAIMS_KEY] = verdict.claims
            scope[PRINCIPAL_KEY] = principal(verdict.claims)
            scope[EXPIRES_KEY] = float(verdict.claims["exp"]) + self.config.clock_tolerance_s
            return False
        error = verdict.error or "no_token"
        client = scope.get("client")
        peer = str(client[0])[:64] if isinstance(client, list | tuple) and client else ""
        log.warning("request refused", error=error, status=verdict.status, path=path[:200],
                    reason=verdict.reason, peer=peer)
        self._on_deny(error, verdict.status, path[:200])
        for document in self.denials.note({"error": error, "status": verdict.status, "path": path[:200],
                                           "peer": peer}):
            self._record(document)
        await self._refuse(verdict, send)
        return True

    async def check(self, token: str) -> Verdict:
        """The verdict on one token, with the keys in force (never waiting for a fetch while there
        are some). An unknown `kid` asks for a refresh (rate-limited) and waits a short while for
        it; with no key ever loaded, a short wait for the load under way, then 503."""
        if not self.keys.current():
            await self.keys.refresh()
            if not self.keys.current():
                return UNAVAILABLE
        verdict = verify(token, self.keys.current(), self.config, self._now())
        if verdict.unknown_kid and await self.keys.refresh():
            verdict = verify(token, self.keys.current(), self.config, self._now())
        return verdict

    async def _refuse(self, verdict: Verdict, send: Send) -> None:
        config = self.config
        if verdict.status == 503:
            await _json(send, 503, challenge.body(verdict.error, verdict.description),
                        [(b"retry-after", str(RETRY_AFTER_S).encode()), (b"cache-control", b"no-store")])
            return
        header = challenge.www_authenticate(config.resource_metadata_url, error=verdict.error,
                                            description=verdict.description, scopes=config.required_scopes)
        document = challenge.body(verdict.error, verdict.description)
        await _json(send, verdict.status, document,
                    [(b"www-authenticate", header.encode("ascii")), (b"cache-control", b"no-store")])

    async def _metadata(self, method: str, send: Send) -> None:
        if method not in ("GET", "HEAD"):
            await _json(send, 405, {"error": "method_not_allowed", "error_description": "GET or HEAD only"},
                        [(b"allow", b"GET, HEAD")])
            return
        await _json(send, 200, self.config.metadata(), [(b"cache-control", METADATA_CACHE)],
                    head=method == "HEAD")


async def _json(send: Send, status: int, document: dict[str, Any],
                headers: list[tuple[bytes, bytes]], *, head: bool = False) -> None:
    """A JSON answer; for HEAD the same head (its content-length too) without the body."""
    body = json.dumps(document).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": b"" if head else body})
