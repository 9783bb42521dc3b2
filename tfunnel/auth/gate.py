"""The per-request check of the HTTP service when authentication is on (`serve.http` calls it).

`screen` answers what it owns and lets the rest through: the Protected Resource Metadata documents
(RFC 9728, unauthenticated, GET only), and the refusals — a missing, malformed or bad token (401 or
400) or a missing scope (403), each with its `WWW-Authenticate` challenge. `/livez` and `/readyz`
are always open (an orchestrator's probes carry no token); `/health` and `/metrics` are open only
with `protectOperations: false`. Everything else (`/mcp`, `/sse`, `/messages`, unknown paths) needs
a valid token, and is screened before the HTTP app counts it, mints a session or routes it.

The token goes no further than this module: the app, the router and the upstreams never see HTTP
headers. The claims of a good token are left on the ASGI scope (`tfunnel.auth`) for later use.
Each refusal is logged with its real reason and handed to `on_deny` (the audit log and the
metrics); neither ever gets the token.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import structlog

from tfunnel.auth import challenge
from tfunnel.auth.config import AuthConfig
from tfunnel.auth.jwks import KeyCache
from tfunnel.auth.verify import Verdict, bearer_token, verify

log = structlog.get_logger("tfunnel.auth")

ALWAYS_OPEN = frozenset({"/livez", "/readyz"})
OPERATIONS = frozenset({"/health", "/metrics"})
# The metadata changes only with the config file, which is read at start.
METADATA_CACHE = b"public, max-age=3600"
CLAIMS_KEY = "tfunnel.auth"

Scope = MutableMapping[str, Any]
Send = Callable[[dict[str, Any]], Awaitable[None]]
OnDeny = Callable[[str, int, str], None]  # (error, status, path)


class AuthGate:
    """The resource server for one gateway: its config, its keys, where denials go."""

    def __init__(self, config: AuthConfig, keys: KeyCache, on_deny: OnDeny,
                 now: Callable[[], float] = time.time) -> None:
        self.config = config
        self.keys = keys
        self._on_deny = on_deny
        self._now = now

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
            return False
        error = verdict.error or "no_token"
        log.warning("request refused", error=error, status=verdict.status, path=path[:200],
                    reason=verdict.reason)
        self._on_deny(error, verdict.status, path[:200])
        await self._refuse(verdict, send)
        return True

    async def check(self, token: str) -> Verdict:
        """The verdict on one token; an unknown `kid` fetches the keys again (rate-limited) and
        decides once more."""
        verdict = verify(token, await self.keys.current(), self.config, self._now())
        if verdict.unknown_kid and await self.keys.refresh():
            verdict = verify(token, self.keys.keys, self.config, self._now())
        return verdict

    async def _refuse(self, verdict: Verdict, send: Send) -> None:
        config = self.config
        header = challenge.www_authenticate(config.resource_metadata_url, error=verdict.error,
                                            description=verdict.description, scopes=config.required_scopes)
        document = challenge.body(verdict.error, verdict.description)
        await _json(send, verdict.status, document,
                    [(b"www-authenticate", header.encode("ascii")), (b"cache-control", b"no-store")])

    async def _metadata(self, method: str, send: Send) -> None:
        if method != "GET":
            await _json(send, 405, {"error": "method_not_allowed", "error_description": "GET only"},
                        [(b"allow", b"GET")])
            return
        await _json(send, 200, self.config.metadata(), [(b"cache-control", METADATA_CACHE)])


async def _json(send: Send, status: int, document: dict[str, Any],
                headers: list[tuple[bytes, bytes]]) -> None:
    body = json.dumps(document).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), *headers]})
    await send({"type": "http.response.body", "body": body})
