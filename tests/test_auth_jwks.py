"""The signing-key cache: discovery, coalesced and rate-limited refreshes, last good keys kept;
under a MockClock with a scripted fetch, and once against a real local issuer."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.authserver import ec_key, issuer_server, rsa_key
from tfunnel.auth.config import AuthConfig
from tfunnel.auth.jwks import MAX_AGE_S, MIN_REFRESH_S, JwksError, KeyCache, discovery_urls, fetch_json

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
    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(cache.current)
    assert len(issuer.fetched) == 1 and _kids(cache) == ["k1"]
    issuer.documents["https://as.example/jwks"] = {"keys": [KEY_1.jwk(), KEY_2.jwk()]}
    results: list[bool] = []

    async def refresh() -> None:
        results.append(await cache.refresh())

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(refresh)
    assert len(issuer.fetched) == 2 and results == [True] * 5 and _kids(cache) == ["k1", "k2"]
    assert await cache.refresh() is False and len(issuer.fetched) == 2
    await trio.sleep(MIN_REFRESH_S)
    assert await cache.refresh() is True and len(issuer.fetched) == 3


@pytest.mark.trio_clock
async def test_last_good_keys_stay_when_the_issuer_fails() -> None:
    """A failed fetch or a key set with no usable key leaves the keys in force."""
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


@pytest.mark.trio_clock
async def test_old_keys_are_refreshed_in_passing() -> None:
    """Keys older than MAX_AGE_S are fetched again before they are used."""
    issuer = Issuer({"https://as.example/jwks": {"keys": [KEY_1.jwk()]}})
    cache = KeyCache(_config(), issuer)
    await cache.current()
    await cache.current()
    assert len(issuer.fetched) == 1
    await trio.sleep(MAX_AGE_S)
    issuer.documents["https://as.example/jwks"] = {"keys": [KEY_2.jwk()]}
    assert [k.kid for k in await cache.current()] == ["k2"]


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
    ]
    for documents, kids in cases:
        cache = KeyCache(_config(jwks_uri=""), Issuer(documents))
        await cache.load()
        assert _kids(cache) == kids, documents


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
