"""The signing-key cache: discovery, coalesced and rate-limited refreshes, last good keys kept;
under a MockClock with a scripted fetch, and once against a real local issuer."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.authserver import ec_key, issuer_server, rsa_key
from tfunnel.auth.config import AuthConfig
from tfunnel.auth.jwks import (
    MAX_AGE_S,
    MIN_REFRESH_S,
    WAIT_S,
    JwksError,
    KeyCache,
    discovery_urls,
    fetch_json,
)

pytestmark = pytest.mark.timeout(60)

ISSUER = "https://as.example/realm"
KEY_1, KEY_2 = rsa_key("k1"), ec_key("k2")


class Issuer:
    """A scripted fetch: documents by URL, a failure switch, and a count of fetches by URL."""

    def __init__(self, documents: dict[str, Any], delay: float = 0.0) -> None:
        self.documents = documents
        self.delay = delay
        self.down = False
        self.fetched: list[str] = []

    async def __call__(self, url: str) -> Any:
        self.fetched.append(url)
        await trio.sleep(self.delay)
        if self.down or url not in self.documents:
            raise JwksError(f"{url}: HTTP 503")
        if isinstance(self.documents[url], Exception):
            raise self.documents[url]  # what a client library might raise (IDNA, a bug)
        return self.documents[url]


def _config(jwks_uri: str = "https://as.example/jwks") -> AuthConfig:
    return AuthConfig(enabled=True, issuer=ISSUER, audience="https://gw.example/mcp", jwks_uri=jwks_uri)


def _kids(cache: KeyCache) -> list[str | None]:
    return [k.kid for k in cache.keys]


@pytest.mark.trio_clock
async def test_refreshes_are_rate_limited_and_coalesced() -> None:
    """After the first load one refresh per MIN_REFRESH_S; callers during a fetch share it."""
    issuer = Issuer({"https://as.example/jwks": {"keys": [KEY_1.jwk()]}}, delay=1.0)
    cache = KeyCache(_config(), issuer)
    results: list[bool] = []

    async def refresh() -> None:
        results.append(await cache.refresh())

    async with trio.open_nursery() as nursery:
        await nursery.start(cache.run)
        await trio.sleep(2)  # its first load is done
        assert len(issuer.fetched) == 1 and _kids(cache) == ["k1"]
        issuer.documents["https://as.example/jwks"] = {"keys": [KEY_1.jwk(), KEY_2.jwk()]}
        async with trio.open_nursery() as callers:
            for _ in range(5):
                callers.start_soon(refresh)
        assert len(issuer.fetched) == 2  # the one refresh all five shared
        assert results == [True] * 5 and _kids(cache) == ["k1", "k2"]
        assert await cache.refresh() is False and len(issuer.fetched) == 2
        await trio.sleep(MIN_REFRESH_S)
        assert await cache.refresh() is True and len(issuer.fetched) == 3
        nursery.cancel_scope.cancel()


@pytest.mark.trio_clock
async def test_last_good_keys_stay_when_the_issuer_fails() -> None:
    """A failed fetch, a key set with no usable key, or a fetch that raises anything at all leaves
    the keys in force."""
    issuer = Issuer({"https://as.example/jwks": {"keys": [KEY_1.jwk()]}})
    cache = KeyCache(_config(), issuer)
    await cache.load()
    issuer.down = True
    await cache.load()
    assert _kids(cache) == ["k1"]
    issuer.down = False
    issuer.documents["https://as.example/jwks"] = {"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}
    await cache.load()
    assert _kids(cache) == ["k1"]

    async def raising(url: str) -> Any:
        raise UnicodeError("label empty or too long")

    cache._fetch = raising
    await cache.load()
    assert _kids(cache) == ["k1"]


@pytest.mark.trio_clock
async def test_old_keys_are_refreshed_in_the_background() -> None:
    """Keys older than MAX_AGE_S are fetched again by `run`, not by whoever uses them."""
    issuer = Issuer({"https://as.example/jwks": {"keys": [KEY_1.jwk()]}})
    cache = KeyCache(_config(), issuer)
    async with trio.open_nursery() as nursery:
        await nursery.start(cache.run)
        await trio.sleep(1)
        assert [k.kid for k in cache.current()] == ["k1"] and len(issuer.fetched) == 1
        issuer.documents["https://as.example/jwks"] = {"keys": [KEY_2.jwk()]}
        await trio.sleep(MAX_AGE_S)
        assert [k.kid for k in cache.current()] == ["k2"] and len(issuer.fetched) == 2
        nursery.cancel_scope.cancel()


@pytest.mark.trio_clock
async def test_a_slow_issuer_never_stalls_requests_while_keys_exist() -> None:
    """Stale while revalidating: with keys in force a slow refresh makes nobody wait; an unknown
    kid waits at most WAIT_S; a flood of unknown kids makes one fetch."""
    issuer = Issuer({"https://as.example/jwks": {"keys": [KEY_1.jwk()]}})
    cache = KeyCache(_config(), issuer)
    async with trio.open_nursery() as nursery:
        await nursery.start(cache.run)
        await trio.sleep(1)
        issuer.delay = 1000.0  # hangs from now on
        started = trio.current_time()
        results: list[bool] = []

        async def unknown_kid() -> None:
            results.append(await cache.refresh())

        async with trio.open_nursery() as flood:
            for _ in range(50):
                flood.start_soon(unknown_kid)
        assert trio.current_time() - started <= WAIT_S
        assert results == [False] * 50 and len(issuer.fetched) == 2  # one refresh, still under way
        assert _kids(cache) == ["k1"]  # current() answers at once meanwhile
        nursery.cancel_scope.cancel()


@pytest.mark.trio_clock
async def test_with_no_key_ever_loaded_requests_wait_briefly_and_run_retries() -> None:
    """An issuer that hangs at start: a request waits at most WAIT_S (then the gate answers 503);
    `run` keeps retrying on its own schedule, however many requests come, and loads once it can."""
    issuer = Issuer({"https://as.example/jwks": {"keys": [KEY_1.jwk()]}}, delay=1000.0)
    cache = KeyCache(_config(), issuer)
    async with trio.open_nursery() as nursery:
        await nursery.start(cache.run)
        started = trio.current_time()
        assert await cache.refresh() is False and cache.current() == ()
        assert trio.current_time() - started == pytest.approx(WAIT_S)
        for _ in range(20):
            assert await cache.refresh() is False
        assert len(issuer.fetched) == 1
        issuer.delay = 0.0
        await trio.sleep(1000.0 + MIN_REFRESH_S)
        assert _kids(cache) == ["k1"]
        nursery.cancel_scope.cancel()


@pytest.mark.trio_clock
async def test_a_discovered_jwks_uri_is_discovered_again_after_a_failure() -> None:
    """The issuer moved its keys: the next round after a failure asks discovery again."""
    rfc8414, _ = discovery_urls(ISSUER)
    jwks = {"keys": [KEY_1.jwk()]}
    issuer = Issuer({rfc8414: {"issuer": ISSUER, "jwks_uri": "https://as.example/a"},
                     "https://as.example/a": jwks})
    cache = KeyCache(_config(jwks_uri=""), issuer)
    await cache.load()
    issuer.documents = {rfc8414: {"issuer": ISSUER, "jwks_uri": "https://as.example/b"},
                        "https://as.example/b": {"keys": [KEY_2.jwk()]}}
    await cache.load()  # /a fails
    assert _kids(cache) == ["k1"]
    await cache.load()
    assert _kids(cache) == ["k2"] and issuer.fetched[-2:] == [rfc8414, "https://as.example/b"]


@pytest.mark.trio_clock
async def test_discovery_rules() -> None:
    """RFC 8414 then OIDC; a document of another issuer or pointing off-origin is not used."""
    assert discovery_urls(ISSUER) == ["https://as.example/.well-known/oauth-authorization-server/realm",
                                      "https://as.example/realm/.well-known/openid-configuration"]
    rfc8414, oidc = discovery_urls(ISSUER)
    jwks = {"keys": [KEY_1.jwk()]}
    cases: list[tuple[dict[str, Any], list[str | None]]] = [
        ({oidc: {"issuer": ISSUER, "jwks_uri": "https://as.example/keys"}, "https://as.example/keys": jwks},
         ["k1"]),
        ({rfc8414: {"issuer": ISSUER, "jwks_uri": "https://AS.example:443/keys"},
          "https://AS.example:443/keys": jwks}, ["k1"]),
        ({rfc8414: {"issuer": "https://evil.example", "jwks_uri": "https://as.example/keys"},
          "https://as.example/keys": jwks}, []),
        ({rfc8414: {"issuer": ISSUER, "jwks_uri": "https://evil.example/keys"},
          "https://evil.example/keys": jwks}, []),
        ({rfc8414: {"issuer": ISSUER, "jwks_uri": "http://as.example/keys"}, "http://as.example/keys": jwks},
         []),
        ({rfc8414: {"issuer": ISSUER, "jwks_uri": "https://as.example:8443/keys"},
          "https://as.example:8443/keys": jwks}, []),
        ({rfc8414: {"issuer": ISSUER, "jwks_uri": "https://[as.example/jwks"}}, []),  # does not parse
        ({rfc8414: {"issuer": ISSUER, "jwks_uri": "https://as..example/jwks"}}, []),  # fails IDNA
        ({rfc8414: {"issuer": ISSUER, "jwks_uri": "https://as.example/keys"},
          "https://as.example/keys": {"keys": [{"kty": "RSA", "alg": "none", "n": "AQAB", "e": "AQAB"},
                                               KEY_1.jwk()]}}, ["k1"]),  # alg none skipped
        ({rfc8414: UnicodeError("label empty or too long"),
          oidc: {"issuer": ISSUER, "jwks_uri": "https://as.example/keys"}, "https://as.example/keys": jwks},
         ["k1"]),  # any failure of one discovery URL: the next is tried
    ]
    for documents, kids in cases:
        cache = KeyCache(_config(jwks_uri=""), Issuer(documents))
        await cache.load()
        assert _kids(cache) == kids, documents


async def test_fetch_refuses_redirects_oversize_and_a_hung_issuer(monkeypatch: pytest.MonkeyPatch) -> None:
    """No redirect is followed, a document past 256 KiB is refused while it streams, an issuer
    that does not answer times out; each a JwksError."""
    monkeypatch.setattr("tfunnel.auth.jwks.FETCH_TIMEOUT_S", 1.0)
    with trio.fail_after(30):
        async with issuer_server(KEY_1) as server:
            server.special["/moved"] = (302, [(b"location", f"{server.url}/jwks".encode())], b"")
            with pytest.raises(JwksError, match="HTTP 302"):
                await fetch_json(f"{server.url}/moved")
            big = b'{"keys": [], "pad": "' + b"x" * (256 * 1024) + b'"}'
            server.special["/big"] = (200, [(b"content-type", b"application/json")], big)
            with pytest.raises(JwksError, match="larger than 262144 bytes"):
                await fetch_json(f"{server.url}/big")
            assert len(big) - 256 * 1024 < 100  # just past the cap: the cap is what refuses it
            server.hang = True
            with pytest.raises(JwksError, match="no answer within"):
                await fetch_json(f"{server.url}/jwks")
            server.hang = False
            with pytest.raises(JwksError, match=r"UnicodeError|invalid host"):
                await fetch_json("https://" + "a" * 64 + ".example/jwks")


async def test_fetch_against_a_real_issuer() -> None:
    """httpx2 on trio: discovery and the key set from a local server; errors are JwksError."""
    with trio.fail_after(30):
        async with issuer_server(KEY_1) as server:
            config = AuthConfig(enabled=True, issuer=server.url, audience="http://127.0.0.1:9/mcp")
            cache = KeyCache(config)
            await cache.load()
            assert _kids(cache) == ["k1"]
            with pytest.raises(JwksError, match="HTTP 404"):
                await fetch_json(f"{server.url}/nothing")
            with pytest.raises(JwksError, match="https"):
                await fetch_json("http://as.example/jwks")
            server.up = False
            with pytest.raises(JwksError, match="HTTP 503"):
                await fetch_json(f"{server.url}/jwks")
