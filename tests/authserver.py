"""Test keys and a local authorization server's metadata: a JWKS server on a loopback port 0.

`Signer` holds keys generated at test time (`cryptography`, RSA and EC) and mints tokens with
them, including the forged kinds a resource server must refuse (`alg: none`, HS256 keyed with the
public key). `issuer_server` serves RFC 8414 discovery and a JWK Set that a test can change (key
rotation) or take down (issuer unreachable) while a gateway uses it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import hypercorn.config
import hypercorn.trio
import jwt
import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from tfunnel.serve.asgi import lifespan

AUDIENCE = "http://127.0.0.1:9/mcp"  # the gateway's resource URI in tokens (a port 0 bind is unknown)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class SigningKey:
    kid: str
    alg: str
    private: Any

    def jwk(self) -> dict[str, Any]:
        public = self.private.public_key()
        family = RSAAlgorithm if self.alg.startswith(("RS", "PS")) else ECAlgorithm
        exported = family.to_jwk(public, as_dict=True)
        return {**exported, "kid": self.kid, "use": "sig", "alg": self.alg}

    def public_pem(self) -> bytes:
        return bytes(self.private.public_key().public_bytes(serialization.Encoding.PEM,
                                                            serialization.PublicFormat.SubjectPublicKeyInfo))


def rsa_key(kid: str, alg: str = "RS256") -> SigningKey:
    return SigningKey(kid, alg, rsa.generate_private_key(public_exponent=65537, key_size=2048))


def ec_key(kid: str) -> SigningKey:
    return SigningKey(kid, "ES256", ec.generate_private_key(ec.SECP256R1()))


@dataclass
class Signer:
    """Mints tokens for `issuer` and `audience`; `claims` are the defaults of each token."""

    issuer: str
    audience: str = AUDIENCE
    keys: list[SigningKey] = field(default_factory=list)

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {"iss": self.issuer, "aud": self.audience, "sub": "tester", "iat": now,
                                  "exp": now + 600, "scope": "mcp:tools"}
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def token(self, key: SigningKey | None = None, headers: dict[str, Any] | None = None,
              **overrides: Any) -> str:
        key = key or self.keys[0]
        merged = {k: v for k, v in {"kid": key.kid, **(headers or {})}.items() if v is not None}
        return jwt.encode(self.claims(**overrides), key.private, algorithm=key.alg, headers=merged)

    def unsigned(self, **overrides: Any) -> str:
        """`alg: none`: no signature at all."""
        header = _b64(json.dumps({"alg": "none", "typ": "JWT", "kid": self.keys[0].kid}).encode())
        return f"{header}.{_b64(json.dumps(self.claims(**overrides)).encode())}."

    def hmac_with_public_key(self, key: SigningKey | None = None) -> str:
        """HS256 keyed with the public key's PEM: the classic algorithm-confusion forgery."""
        key = key or self.keys[0]
        header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": key.kid}).encode())
        signing_input = f"{header}.{_b64(json.dumps(self.claims()).encode())}"
        mac = hmac.new(key.public_pem(), signing_input.encode(), hashlib.sha256).digest()
        return f"{signing_input}.{_b64(mac)}"


@dataclass
class IssuerState:
    """What the server answers; change it while it runs."""

    url: str = ""
    keys: list[SigningKey] = field(default_factory=list)
    up: bool = True
    hits: dict[str, int] = field(default_factory=dict)
    hang: bool = False  # every request waits (an issuer that does not answer) until cleared
    # path → (status, extra headers, body): answers that replace the usual ones (a redirect,
    # an oversized document, a discovery document of a test's own making)
    special: dict[str, tuple[int, list[tuple[bytes, bytes]], bytes]] = field(default_factory=dict)

    def jwks(self) -> dict[str, Any]:
        return {"keys": [k.jwk() for k in self.keys]}


def _app(state: IssuerState) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        path = scope["path"]
        state.hits[path] = state.hits.get(path, 0) + 1
        while state.hang:
            await trio.sleep(0.05)
        if path in state.special:
            status, headers, body = state.special[path]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        if not state.up:
            status, document = 503, {"error": "down"}
        elif path == "/.well-known/oauth-authorization-server":
            status, document = 200, {"issuer": state.url, "jwks_uri": f"{state.url}/jwks",
                                     "authorization_endpoint": f"{state.url}/authorize",
                                     "token_endpoint": f"{state.url}/token"}
        elif path == "/jwks":
            status, document = 200, state.jwks()
        else:
            status, document = 404, {"error": "not found"}
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": json.dumps(document).encode()})

    return app


@asynccontextmanager
async def issuer_server(*keys: SigningKey) -> AsyncIterator[IssuerState]:
    """An authorization server's metadata and JWK Set on 127.0.0.1:<port 0>; its URL is the issuer."""
    state = IssuerState(keys=list(keys))
    config = hypercorn.config.Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(lambda task_status: hypercorn.trio.serve(
            _app(state), config, shutdown_trigger=shutdown.wait, task_status=task_status))
        state.url = urls[0]
        try:
            yield state
        finally:
            state.hang = False
            shutdown.set()
