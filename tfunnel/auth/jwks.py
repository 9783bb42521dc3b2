"""The issuer's signing keys: fetched, cached, refreshed on an unknown `kid`, kept when the issuer
is unreachable.

Where the keys are: `jwksUri` when configured, else discovered from the issuer: RFC 8414
(`<origin>/.well-known/oauth-authorization-server<issuer path>`), then OpenID Connect
(`<issuer>/.well-known/openid-configuration`). A discovery document counts only if its `issuer` is
exactly ours and its `jwks_uri` is on the issuer's origin (a document that points elsewhere could
hand out anyone's keys; a different origin needs an explicit `jwksUri`).

Every fetch: https (or http on a loopback host), no redirects, no proxy from the environment, a
timeout, a size cap on the document. A fetch that fails, or a key set without one usable key, leaves
the last good keys in force (logged). Refreshes are rate-limited: after the first load, at most one
fetch per `MIN_REFRESH_S` (an unknown `kid` in every request of a flood must not become a flood of
fetches at the issuer), and callers that arrive while one is under way share it. Keys older than
`MAX_AGE_S` are refreshed in passing, so a withdrawn key does not stay trusted forever. Times come
from trio's clock, so tests can run it under `MockClock`.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
import trio

from tfunnel.auth.config import AuthConfig, url_problem
from tfunnel.auth.verify import Key

log = structlog.get_logger("tfunnel.auth")

MIN_REFRESH_S = 30.0
MAX_AGE_S = 3600.0
FETCH_TIMEOUT_S = 10.0
MAX_DOCUMENT_BYTES = 256 * 1024
KEY_TYPES = ("RSA", "EC", "OKP")

Fetch = Callable[[str], Awaitable[Any]]


class JwksError(Exception):
    """A key set or discovery document could not be had; the message says why (no secrets)."""


async def fetch_json(url: str) -> Any:
    """GET `url` and parse its JSON body; raise `JwksError` for anything else."""
    import httpx2  # here: only a gateway with authentication on fetches anything

    problem = url_problem(url, allow_query=True)
    if problem is not None:
        raise JwksError(f"{url[:200]} {problem}")
    body = bytearray()
    try:
        with trio.fail_after(FETCH_TIMEOUT_S):
            async with httpx2.AsyncClient(timeout=FETCH_TIMEOUT_S, follow_redirects=False, trust_env=False,
                                          verify=True) as client, \
                    client.stream("GET", url, headers={"accept": "application/json"}) as response:
                if response.status_code != 200:
                    raise JwksError(f"{url}: HTTP {response.status_code}")
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_DOCUMENT_BYTES:
                        raise JwksError(f"{url}: larger than {MAX_DOCUMENT_BYTES} bytes")
    except trio.TooSlowError as exc:
        raise JwksError(f"{url}: no answer within {FETCH_TIMEOUT_S:.0f} s") from exc
    except httpx2.HTTPError as exc:
        raise JwksError(f"{url}: {type(exc).__name__}: {exc}") from exc
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise JwksError(f"{url}: not a JSON document") from exc


def parse_jwks(document: Any) -> list[Key]:
    """The usable public signing keys of a JWK Set: RSA, EC and OKP keys for signatures; secret
    (`oct`) keys, encryption keys, private keys and keys the library cannot read are left out."""
    import jwt

    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise JwksError('not a JWK Set (no "keys" array)')
    keys: list[Key] = []
    for entry in document["keys"]:
        if not isinstance(entry, dict) or entry.get("kty") not in KEY_TYPES or "d" in entry:
            continue
        if entry.get("use", "sig") != "sig":
            continue
        kid, alg = entry.get("kid"), entry.get("alg")
        try:
            jwk = jwt.PyJWK(entry)
        except (jwt.PyJWTError, ValueError, TypeError, KeyError):
            continue
        keys.append(Key(kid if isinstance(kid, str) else None, entry["kty"],
                        alg if isinstance(alg, str) else None, jwk.key))
    return keys


def _origin(url: str) -> tuple[str, str, int]:
    """Scheme, host and port, the scheme's default port written out (`:443` is the same origin)."""
    split = urllib.parse.urlsplit(url)
    default = 443 if split.scheme == "https" else 80
    return split.scheme, (split.hostname or "").lower(), split.port or default


def discovery_urls(issuer: str) -> list[str]:
    """Where the issuer's metadata may be, in the order they are tried."""
    split = urllib.parse.urlsplit(issuer)
    path = split.path.rstrip("/")
    return [f"{split.scheme}://{split.netloc}/.well-known/oauth-authorization-server{path}",
            f"{issuer.rstrip('/')}/.well-known/openid-configuration"]


class KeyCache:
    """The signing keys in force (`keys`), and how they are renewed."""

    def __init__(self, config: AuthConfig, fetch: Fetch = fetch_json,
                 clock: Callable[[], float] = trio.current_time) -> None:
        self._config = config
        self._fetch = fetch
        self._clock = clock
        self._jwks_uri = config.jwks_uri or None
        self.keys: tuple[Key, ...] = ()
        self.fetches = 0  # fetch rounds started (for tests and the log)
        self._loaded_at: float | None = None
        self._refreshed_at: float | None = None
        self._attempted = False
        self._loading: trio.Event | None = None

    async def load(self) -> None:
        """Fetch the keys now, or wait for the fetch under way. Never raises for a bad issuer."""
        if self._loading is not None:
            await self._loading.wait()
            return
        self._attempted = True
        self._loading = trio.Event()
        try:
            await self._fetch_keys()
        finally:
            self._loading.set()
            self._loading = None

    async def refresh(self) -> bool:
        """Fetch again because a token named a key we do not have; False (nothing fetched) when a
        refresh ran less than `MIN_REFRESH_S` ago. A fetch under way is shared, not repeated."""
        if self._loading is not None:
            await self._loading.wait()
            return True
        now = self._clock()
        if self._refreshed_at is not None and now - self._refreshed_at < MIN_REFRESH_S:
            return False
        self._refreshed_at = now
        await self.load()
        return True

    async def current(self) -> tuple[Key, ...]:
        """The keys to verify with: the first caller waits for the first load; keys older than
        `MAX_AGE_S` are refreshed first (rate-limited; on failure the old ones stay)."""
        if not self._attempted or self._loading is not None:
            await self.load()
        elif self._loaded_at is not None and self._clock() - self._loaded_at >= MAX_AGE_S:
            await self.refresh()
        return self.keys

    async def _fetch_keys(self) -> None:
        self.fetches += 1
        try:
            uri = self._jwks_uri or await self._discover()
            keys = parse_jwks(await self._fetch(uri))
            if not keys:
                raise JwksError(f"{uri}: no usable signing key (RSA, EC or OKP, use sig)")
        except JwksError as exc:
            log.warning("signing keys not fetched; the last good keys stay in force", error=str(exc),
                        kept=len(self.keys))
            return
        self._jwks_uri = uri
        self.keys = tuple(keys)
        self._loaded_at = self._clock()
        log.info("signing keys fetched", jwks_uri=uri, keys=len(keys),
                 kids=[k.kid for k in keys if k.kid is not None][:20])

    async def _discover(self) -> str:
        issuer = self._config.issuer
        why: list[str] = []
        for url in discovery_urls(issuer):
            try:
                document = await self._fetch(url)
            except JwksError as exc:
                why.append(str(exc))
                continue
            if not isinstance(document, dict) or document.get("issuer") != issuer:
                why.append(f"{url}: its issuer is not {issuer!r}")
                continue
            jwks_uri = document.get("jwks_uri")
            if not isinstance(jwks_uri, str) or url_problem(jwks_uri, allow_query=True) is not None:
                why.append(f"{url}: no acceptable jwks_uri")
                continue
            if _origin(jwks_uri) != _origin(issuer):
                why.append(f"{url}: jwks_uri {jwks_uri[:200]!r} is not on the issuer's origin "
                           "(configure jwksUri to trust another origin)")
                continue
            return jwks_uri
        raise JwksError("discovery failed: " + "; ".join(why))
