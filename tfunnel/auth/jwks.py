"""The issuer's signing keys: fetched, cached, refreshed on an unknown `kid`, kept when the issuer
is unreachable.

Where the keys are: `jwksUri` when configured, else discovered from the issuer: RFC 8414
(`<origin>/.well-known/oauth-authorization-server<issuer path>`), then OpenID Connect
(`<issuer>/.well-known/openid-configuration`). A discovery document counts only if its `issuer` is
exactly ours and its `jwks_uri` is on the issuer's origin (a document that points elsewhere could
hand out anyone's keys; a different origin needs an explicit `jwksUri`).

Every fetch: https (or http on a loopback host), no redirects, no proxy from the environment, a
timeout, a size cap on the document. A fetch that fails in any way, or a key set without one usable
key, leaves the last good keys in force (logged; a discovered `jwks_uri` is discovered again next
time); an entry the library cannot read is skipped. Fetches run in one task (`KeyCache.run`, owned
by the gate), never in a request: a request uses the keys in force at once; one naming an unknown
`kid` waits at most `WAIT_S` for a refresh. Refreshes are rate-limited: after the first load, at most
one per `MIN_REFRESH_S` (an unknown `kid` in every request of a flood, which any unauthenticated
client can send, must not become a flood of fetches at the issuer nor make requests wait), and
callers that arrive while one is under way share it. Keys older than `MAX_AGE_S` are refreshed, so a
withdrawn key does not stay trusted forever. Times come from trio's clock, so tests can run it under
`MockClock`.
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
# How long a request naming an unknown `kid` waits for a refresh (or one with no key yet loaded,
# for the first load): past it, it is answered with the keys in force.
WAIT_S = 2.0
# The first load's retries while no key was ever loaded: doubling up to `MIN_REFRESH_S`.
RETRY_MIN_S = 1.0
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
    except JwksError:
        raise
    except trio.TooSlowError as exc:
        raise JwksError(f"{url}: no answer within {FETCH_TIMEOUT_S:.0f} s") from exc
    except Exception as exc:  # httpx2's, and anything else (an IDNA UnicodeError)
        raise JwksError(f"{url[:200]}: {type(exc).__name__}: {str(exc)[:200]}") from exc
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
            key = Key(kid if isinstance(kid, str) else None, entry["kty"],
                      alg if isinstance(alg, str) else None, jwk.key)
        except Exception:  # any entry the library cannot read (`alg: none`: NotImplementedError)
            continue
        keys.append(key)
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
    """The signing keys in force (`keys`), and how they are renewed: by `run`, a task of the gate's
    (never a request's). Stale while revalidating: a request never waits for a fetch while keys
    exist, except that one naming an unknown `kid` waits up to `WAIT_S` for a refresh."""

    def __init__(self, config: AuthConfig, fetch: Fetch = fetch_json,
                 clock: Callable[[], float] = trio.current_time) -> None:
        self._config = config
        self._fetch = fetch
        self._clock = clock
        self._jwks_uri = config.jwks_uri or None
        self.keys: tuple[Key, ...] = ()
        self.fetches = 0  # fetch rounds started (for tests and the log)
        self._loaded_at: float | None = None
        self._round_at: float | None = None  # when the last round started
        self._refreshed_at: float | None = None  # when the last round after the first started
        self._fetching = False
        self._wanted = trio.Event()  # a refresh was asked for (cleared as a round starts)
        self._done = trio.Event()  # set when the next round ends (then replaced)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the keys: the first load at once (in the background: `started` comes first), retried
        with backoff until some key loads; then a refresh when asked (`refresh`, at most one per
        `MIN_REFRESH_S`) or when the keys are `MAX_AGE_S` old. Runs until cancelled."""
        task_status.started()
        retry = RETRY_MIN_S
        while True:
            await self.load()
            if not self.keys or self._loaded_at is None:
                await trio.sleep(retry)
                retry = min(retry * 2, MIN_REFRESH_S)
                continue
            retry = RETRY_MIN_S
            assert self._round_at is not None
            with trio.move_on_at(max(self._loaded_at + MAX_AGE_S, self._round_at + MIN_REFRESH_S)):
                await self._wanted.wait()

    async def load(self) -> None:
        """Fetch the keys now, or wait for the fetch under way. Never raises for a bad issuer."""
        if self._fetching:
            await self._done.wait()
            return
        self._fetching = True
        self._wanted = trio.Event()
        now = self._clock()
        if self._round_at is not None:
            self._refreshed_at = now
        self._round_at = now
        done = self._done
        try:
            await self._fetch_keys()
        finally:
            self._fetching = False
            self._done = trio.Event()
            done.set()

    async def refresh(self, wait_s: float | None = None) -> bool:
        """A token named a key we do not have (or no key was ever loaded): join the refresh under
        way, or ask `run` for one (at most one per `MIN_REFRESH_S` after the first load, and none
        beyond `run`'s own retries while no key was ever loaded), and wait for it at most
        `wait_s` (`WAIT_S`). True when a round ended meanwhile (the keys may have changed)."""
        if not self._fetching and not self._wanted.is_set():
            if not self.keys or not self._may_refresh():
                return False
            self._wanted.set()
        done = self._done
        with trio.move_on_after(WAIT_S if wait_s is None else wait_s):
            await done.wait()
        return done.is_set()

    def _may_refresh(self) -> bool:
        return self._refreshed_at is None or self._clock() - self._refreshed_at >= MIN_REFRESH_S

    def current(self) -> tuple[Key, ...]:
        """The keys to verify with, now: never waits (`run` renews them in the background)."""
        return self.keys

    async def _fetch_keys(self) -> None:
        self.fetches += 1
        discovered = self._jwks_uri is None
        try:
            uri = self._jwks_uri or await self._discover()
            keys = parse_jwks(await self._fetch(uri))
            if not keys:
                raise JwksError(f"{uri}: no usable signing key (RSA, EC or OKP, use sig)")
        except Exception as exc:  # never trio.Cancelled (a BaseException)
            if not self._config.jwks_uri:
                self._jwks_uri = None  # discovered: the next round discovers again
            log.warning("signing keys not fetched; the last good keys stay in force",
                        error=_describe(exc), kept=len(self.keys), discovered=discovered)
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
            except Exception as exc:  # never trio.Cancelled
                why.append(_describe(exc))
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


def _describe(exc: Exception) -> str:
    return str(exc)[:400] if isinstance(exc, JwksError) else f"{type(exc).__name__}: {str(exc)[:300]}"
