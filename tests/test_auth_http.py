"""Authentication end to end: the HTTP service in-process (`tfunnel.testing.gateway`) on a real
loopback port, on a temp home with `auth/auth.config.json`, a local issuer serving discovery and a
JWK Set, tokens minted with keys generated at test time. The command's own refusals to start (a
broken auth config, a non-loopback bind without authentication) are in tests/e2e/test_auth_http.py."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.authserver import AUDIENCE, IssuerState, Signer, SigningKey, ec_key, issuer_server, rsa_key
from tests.upstreams import set_upstreams
from tfunnel.testing.gateway import HttpGateway, http_gateway

pytestmark = pytest.mark.timeout(120)

ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
PRM = "http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp"
BARE = f'Bearer resource_metadata="{PRM}", scope="mcp:tools"'


def write_auth(home: Path, issuer: str, **fields: Any) -> None:
    path = home / "auth" / "auth.config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"enabled": True, "issuer": issuer, "audience": AUDIENCE,
                                "requiredScopes": ["mcp:tools"], **fields}))


def enable_audit(home: Path) -> Path:
    (home / "logs").mkdir(exist_ok=True)
    (home / "logs" / "log.config.json").write_text(json.dumps({"enabled": True}))
    return home / "logs" / "toolfunnel.log.jsonl"


@asynccontextmanager
async def authenticated(home: Path, *keys: SigningKey, **fields: Any
                        ) -> AsyncIterator[tuple[IssuerState, HttpGateway, Signer]]:
    """A local issuer with `keys`, and a gateway whose auth config trusts it."""
    async with issuer_server(*keys) as issuer:
        write_auth(home, issuer.url, **fields)
        async with http_gateway(home) as gw:
            yield issuer, gw, Signer(issuer.url, keys=list(keys))


def bearer(token: str) -> dict[str, str]:
    return {**ACCEPT, "authorization": f"Bearer {token}"}


async def initialize(http: httpx2.AsyncClient, url: str, token: str) -> httpx2.Response:
    return await http.post(f"{url}/mcp", json=INIT, headers=bearer(token))


async def test_refusals_each_with_its_status_and_challenge(home: Path) -> None:
    """No token, forged and wrong tokens, missing scope, unknown kid, malformed headers: each
    refused with its status and WWW-Authenticate; denials audited and logged without the token."""
    audit = enable_audit(home)
    key = rsa_key("k1")
    with trio.fail_after(90):
        async with authenticated(home, key, ec_key("k2")) as (_, gw, signer), \
                httpx2.AsyncClient(timeout=10) as http:
            url = f"{gw.url}/mcp"
            none = await http.post(url, json=INIT, headers=ACCEPT)
            assert none.status_code == 401 and none.headers["www-authenticate"] == BARE
            assert none.json()["error"] == "unauthorized"
            other_scheme = await http.post(url, json=INIT, headers={**ACCEPT, "authorization": "Basic eDp5"})
            assert other_scheme.status_code == 401 and other_scheme.headers["www-authenticate"] == BARE
            tokens = {
                "alg none": signer.unsigned(),
                "HS256 keyed with the public key": signer.hmac_with_public_key(),
                "wrong iss": signer.token(iss="https://evil.example"),
                "wrong aud": signer.token(aud="http://127.0.0.1:9/other"),
                "expired": signer.token(exp=1_000_000),
                "future nbf": signer.token(nbf=4_000_000_000),
                "unknown kid": signer.token(rsa_key("k9")),
                "malformed JOSE header": "bm90LWpzb24.e30.c2ln",
            }
            sent: list[str] = list(tokens.values())
            for name, token in tokens.items():
                reply = await http.post(url, json=INIT, headers=bearer(token))
                challenge = reply.headers["www-authenticate"]
                assert reply.status_code == 401, name
                assert challenge.startswith(BARE + ', error="invalid_token", error_description="'), name
                assert reply.json()["error"] == "invalid_token", name
            scope = signer.token(scope="other")
            sent.append(scope)
            forbidden = await http.post(url, json=INIT, headers=bearer(scope))
            assert forbidden.status_code == 403
            assert forbidden.headers["www-authenticate"] == \
                BARE + ', error="insufficient_scope", error_description="missing scope: mcp:tools"'
            for header in ("Bearer a b", "Bearer", 'Bearer a"b'):
                bad = await http.post(url, json=INIT, headers={**ACCEPT, "authorization": header})
                assert bad.status_code == 400, header
                assert 'error="invalid_request"' in bad.headers["www-authenticate"]
            good = signer.token()
            sent.append(good)
            in_query = await http.post(f"{url}?access_token={good}", json=INIT, headers=ACCEPT)
            assert in_query.status_code == 400
            repeated = [*ACCEPT.items(), *[("authorization", f"Bearer {good}")] * 2]
            twice = await http.post(url, json=INIT, headers=repeated)
            assert twice.status_code == 400
            for path in ("/sse", "/messages?session_id=x", "/nowhere"):
                assert (await http.get(f"{gw.url}{path}")).status_code == 401, path
            health = (await http.get(f"{gw.url}/health", headers=bearer(good))).json()
            assert health["clients"]["sessions"] == 0 and health["calls"]["total"] == 0
            metrics = (await http.get(f"{gw.url}/metrics", headers=bearer(good))).text
            assert 'tfunnel_auth_denials_total{error="invalid_token"} 8.0' in metrics
            assert 'tfunnel_auth_denials_total{error="no_token"}' in metrics
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    denials = [r for r in records if r["type"] == "auth"]
    assert len(denials) >= 16
    assert {(r["event"], r["path"]) for r in denials} >= {("deny", "/mcp"), ("deny", "/sse")}
    assert {r["error"] for r in denials} == {"no_token", "invalid_token", "insufficient_scope",
                                             "invalid_request"}
    assert {401, 403, 400} <= {r["status"] for r in denials}
    logged = audit.read_text() + gw.stderr.decode()
    assert "no key with kid 'k9'" in gw.stderr.decode()  # the real reason, server-side
    for token in sent:
        signature = token.split(".")[2]
        assert token not in logged and (len(signature) < 20 or signature not in logged)


async def test_a_valid_token_reaches_the_tools_and_not_the_upstream(home: Path, tmp_path: Path) -> None:
    """RSA and EC tokens reach tools/list and a call; the upstream's input and environment never
    hold the token."""
    seen_env, seen_input = tmp_path / "env.txt", tmp_path / "input.jsonl"
    mock = f"{sys.executable} -m tfunnel.testing.mock_upstream --tools echo"
    script = f"env > {seen_env}; tee {seen_input} | {mock}"
    set_upstreams(home, {"id": "rec", "command": "/bin/sh", "args": ["-c", script]})
    rsa, ec = rsa_key("k1"), ec_key("k2")
    with trio.fail_after(90):
        async with authenticated(home, rsa, ec) as (_, gw, signer), httpx2.AsyncClient(timeout=10) as http:
            used: list[str] = []
            for key in (rsa, ec):
                token = signer.token(key)
                used.append(token)
                reply = await initialize(http, gw.url, token)
                assert reply.status_code == 200, reply.text
                session = {**bearer(token), "mcp-session-id": reply.headers["mcp-session-id"]}
                listed = await http.post(f"{gw.url}/mcp", json=LIST, headers=session)
                assert listed.json()["result"]["tools"][0]["name"] == "toolfunnel_list_tools"
                call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
                    "name": "toolfunnel_run_tool", "arguments": {"name": "rec_echo", "args": {"text": "hi"}}}}
                called = (await http.post(f"{gw.url}/mcp", json=call, headers=session)).json()
                assert called["result"]["content"][0]["text"] == "hi", called
                session_only = {**ACCEPT, "mcp-session-id": reply.headers["mcp-session-id"]}
                without = await http.post(f"{gw.url}/mcp", json=LIST, headers=session_only)
                assert without.status_code == 401  # a session id is no credential
            upstream_saw = seen_env.read_text() + seen_input.read_text()
            assert "rec_echo" not in upstream_saw and '"echo"' in upstream_saw
            for token in used:
                assert token not in upstream_saw and token.split(".")[2] not in upstream_saw
            assert "Bearer" not in upstream_saw and "authorization" not in upstream_saw.lower()


async def test_key_rotation_and_an_unreachable_issuer(home: Path) -> None:
    """A new kid is fetched on first sight; a withdrawn key stops verifying; with the issuer down
    the last good keys still verify."""
    old, new = rsa_key("old"), rsa_key("new")
    with trio.fail_after(90):
        async with authenticated(home, old) as (issuer, gw, signer), httpx2.AsyncClient(timeout=10) as http:
            assert (await initialize(http, gw.url, signer.token(old))).status_code == 200
            fetched = issuer.hits.get("/jwks", 0)
            issuer.keys = [new]
            assert (await initialize(http, gw.url, signer.token(new))).status_code == 200
            assert issuer.hits["/jwks"] == fetched + 1
            withdrawn = await initialize(http, gw.url, signer.token(old))
            assert withdrawn.status_code == 401
            assert 'error="invalid_token"' in withdrawn.headers["www-authenticate"]
            issuer.up = False
            assert (await initialize(http, gw.url, signer.token(new))).status_code == 200
    with trio.fail_after(90):
        async with authenticated(home, old) as (issuer, gw, signer), httpx2.AsyncClient(timeout=10) as http:
            assert (await initialize(http, gw.url, signer.token(old))).status_code == 200
            issuer.up = False
            fetched = issuer.hits["/jwks"]
            assert (await initialize(http, gw.url, signer.token(new))).status_code == 401
            assert issuer.hits["/jwks"] == fetched + 1  # it tried, and failed
            assert (await initialize(http, gw.url, signer.token(old))).status_code == 200
    assert "the last good keys stay in force" in gw.stderr.decode()  # complete once the gateway ended


async def test_open_paths_metadata_and_public_origin(home: Path) -> None:
    """/livez and /readyz are open, /health and /metrics need a token; the metadata documents are
    served at both well-known paths, GET only; Host and Origin may be the audience's."""
    with trio.fail_after(90):
        async with authenticated(home, rsa_key("k1")) as (issuer, gw, signer), \
                httpx2.AsyncClient(timeout=10) as http:
            assert (await http.get(f"{gw.url}/livez")).status_code == 200
            assert (await http.get(f"{gw.url}/readyz")).status_code == 200
            for path in ("/health", "/metrics"):
                refused = await http.get(f"{gw.url}{path}")
                assert refused.status_code == 401 and refused.headers["www-authenticate"] == BARE
                assert (await http.get(f"{gw.url}{path}", headers=bearer(signer.token()))).status_code == 200
            for path in ("/.well-known/oauth-protected-resource",
                         "/.well-known/oauth-protected-resource/mcp"):
                document = await http.get(f"{gw.url}{path}")
                assert document.status_code == 200 and "max-age" in document.headers["cache-control"]
                assert document.json() == {"resource": AUDIENCE, "authorization_servers": [issuer.url],
                                           "bearer_methods_supported": ["header"],
                                           "scopes_supported": ["mcp:tools"]}
                assert (await http.post(f"{gw.url}{path}")).status_code == 405


async def test_operations_open_when_not_protected_and_the_public_authority(home: Path) -> None:
    """protectOperations false: /health and /metrics open, /mcp still needs a token; `Host` and
    `Origin` may be the audience's (a public name behind a proxy), nothing else non-loopback."""
    audience = "https://MCP.example.test:8443/mcp"
    with trio.fail_after(90):
        async with authenticated(home, rsa_key("k1"), protectOperations=False, audience=audience) \
                as (_, gw, _signer), httpx2.AsyncClient(timeout=10) as http:
            assert (await http.get(f"{gw.url}/health")).status_code == 200
            assert (await http.get(f"{gw.url}/metrics")).status_code == 200
            refused = await http.post(f"{gw.url}/mcp", json=INIT, headers=ACCEPT)
            assert refused.status_code == 401
            metadata = "https://mcp.example.test:8443/.well-known/oauth-protected-resource/mcp"  # canonical
            assert refused.headers["www-authenticate"] == \
                f'Bearer resource_metadata="{metadata}", scope="mcp:tools"'
            for headers, status in [({"host": "mcp.example.test:8443"}, 200),
                                    ({"host": "MCP.EXAMPLE.TEST:8443"}, 200),
                                    ({"host": "mcp.example.test"}, 421), ({"host": "evil.example:8443"}, 421),
                                    ({"origin": "https://mcp.example.test:8443"}, 200),
                                    ({"origin": "http://mcp.example.test:8443"}, 403),
                                    ({"origin": "https://evil.example"}, 403),
                                    ({"origin": "http://localhost:3000"}, 200)]:
                assert (await http.get(f"{gw.url}/livez", headers=headers)).status_code == status, headers


async def test_no_metadata_without_authentication(home: Path) -> None:
    """With auth off the well-known paths do not exist and /mcp needs no token."""
    with trio.fail_after(60):
        async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=10) as http:
            assert (await http.get(f"{gw.url}/.well-known/oauth-protected-resource")).status_code == 404
            assert (await http.post(f"{gw.url}/mcp", json=INIT, headers=ACCEPT)).status_code == 200


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_sdk_client_with_a_bearer_token(home: Path, mode: str) -> None:
    """The official SDK client, given an httpx2 client carrying the token, works in both eras."""
    with trio.fail_after(90):
        async with authenticated(home, ec_key("k1")) as (_, gw, signer):
            headers = {"authorization": f"Bearer {signer.token()}"}
            async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
                    Client(streamable_http_client(f"{gw.url}/mcp", http_client=http), mode=mode,
                           cache=None) as client:
                assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
                names = [t.name for t in (await client.list_tools()).tools]
                assert names[0] == "toolfunnel_list_tools"
                added = await client.call_tool("toolfunnel_run_tool",
                                               {"name": "demo_add", "args": {"a": 2, "b": 3}})
                assert added.structured_content == {"result": 5}


def _secret_parts(secret: str) -> list[str]:
    return [secret[i:i + 6] for i in range(len(secret) - 5)]


async def test_unauthenticated_methods_credentials_in_logs_and_peers(home: Path) -> None:
    """GET/DELETE /mcp and HEAD/OPTIONS need a token too; HEAD on the metadata answers like GET
    without a body; no part of a credential of another scheme reaches stderr or the audit log;
    denial records carry the peer; a Host with `?` or `#` is refused."""
    audit = enable_audit(home)
    secrets = ["ghp_SECRETSECRETSECRETSECRET1234", "Bearer\tSECRETTOKENxyz0123456789"]
    with trio.fail_after(90):
        async with authenticated(home, rsa_key("k1"), audience="http://127.0.0.1:9/mcp") \
                as (_, gw, _signer), httpx2.AsyncClient(timeout=10) as http:
            url = f"{gw.url}/mcp"
            for method in ("GET", "DELETE", "HEAD", "OPTIONS", "PUT"):
                reply = await http.request(method, url, headers={"accept": "text/event-stream",
                                                                 "mcp-session-id": "x"})
                assert reply.status_code == 401, method
                assert reply.headers["www-authenticate"] == BARE, method
            got = await http.get(PRM.replace("http://127.0.0.1:9", gw.url))
            head = await http.head(PRM.replace("http://127.0.0.1:9", gw.url))
            assert head.status_code == 200 and head.content == b""
            assert head.headers["content-length"] == str(len(got.content))
            for value in secrets:
                reply = await http.post(url, json=INIT, headers={**ACCEPT, "authorization": value})
                assert reply.status_code == 401
            for host in ("mcp.example?", "127.0.0.1:9#", "127.0.0.1?x"):
                assert (await http.get(f"{gw.url}/livez", headers={"host": host})).status_code == 421, host
    logged = gw.stderr.decode() + audit.read_text()
    assert "another scheme" in logged
    for value in secrets:
        secret = value.split("\t")[-1]
        leaked = [part for part in _secret_parts(secret) if part in logged]
        assert not leaked, leaked
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    assert {r.get("peer") for r in records if r["type"] == "auth"} == {"127.0.0.1"}


async def test_a_hung_issuer_at_start_answers_503_then_recovers(home: Path) -> None:
    """No key ever loaded (the issuer does not answer): 503 with Retry-After and a JSON body after
    a short wait, not invalid_token after the fetch timeouts; once the issuer answers, 200."""
    key = rsa_key("k1")
    with trio.fail_after(90):
        async with issuer_server(key) as issuer:
            issuer.hang = True
            write_auth(home, issuer.url)
            signer = Signer(issuer.url, keys=[key])
            async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=30) as http:
                reply = await initialize(http, gw.url, signer.token())
                assert reply.status_code == 503, reply.text
                assert reply.headers["retry-after"].isdigit()
                assert reply.json()["error"] == "temporarily_unavailable"
                assert "www-authenticate" not in reply.headers
                assert (await http.get(f"{gw.url}/livez")).status_code == 200
                issuer.hang = False
                while (await initialize(http, gw.url, signer.token())).status_code != 200:
                    await trio.sleep(0.2)


async def test_unexpected_key_set_content_never_crashes_the_gateway(home: Path) -> None:
    """A JWK with `alg: none` beside a good key: the good key works. A discovery document whose
    jwks_uri does not parse: the gateway stays up (503: no key) and says why in its log."""
    key = rsa_key("k1")
    with trio.fail_after(90):
        async with authenticated(home, key) as (issuer, gw, signer), httpx2.AsyncClient(timeout=30) as http:
            issuer.special["/jwks"] = (200, [], json.dumps({"keys": [
                {**rsa_key("bad").jwk(), "alg": "none"}, key.jwk()]}).encode())
            assert (await initialize(http, gw.url, signer.token())).status_code == 200
    metadata = "/.well-known/oauth-authorization-server"
    with trio.fail_after(90):
        async with issuer_server(key) as issuer:
            issuer.special[metadata] = (200, [], json.dumps(
                {"issuer": issuer.url, "jwks_uri": "https://[as.example/jwks"}).encode())
            write_auth(home, issuer.url)
            async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=30) as http:
                while issuer.hits.get(metadata, 0) == 0:
                    await trio.sleep(0.05)
                reply = await initialize(http, gw.url, Signer(issuer.url, keys=[key]).token())
                assert reply.status_code == 503
                assert (await http.get(f"{gw.url}/livez")).status_code == 200
                assert gw.exit_code is None  # still serving
    assert "no acceptable jwks_uri" in gw.stderr.decode()


async def test_a_session_belongs_to_its_principal(home: Path) -> None:
    """Alice's session id with mallory's token: 404 for POST, GET and DELETE on /mcp and for
    POST /messages, as if it did not exist; alice's session is untouched."""
    with trio.fail_after(90):
        async with authenticated(home, rsa_key("k1")) as (_, gw, signer), \
                httpx2.AsyncClient(timeout=10) as http:
            alice, mallory = signer.token(sub="alice"), signer.token(sub="mallory")
            session_id = (await initialize(http, gw.url, alice)).headers["mcp-session-id"]
            as_mallory = {**bearer(mallory), "mcp-session-id": session_id}
            stolen = await http.post(f"{gw.url}/mcp", json=LIST, headers=as_mallory)
            assert stolen.status_code == 404 and stolen.json()["error"]["message"] == "Session not found"
            assert (await http.get(f"{gw.url}/mcp", headers={**as_mallory, "accept": "text/event-stream"})
                    ).status_code == 404
            assert (await http.delete(f"{gw.url}/mcp", headers=as_mallory)).status_code == 404
            listed = await http.post(f"{gw.url}/mcp", json=LIST,
                                     headers={**bearer(alice), "mcp-session-id": session_id})
            assert listed.status_code == 200 and "result" in listed.json()
            async with http.stream("GET", f"{gw.url}/sse", headers={
                    "accept": "text/event-stream", "authorization": f"Bearer {alice}"}) as sse:
                lines = sse.aiter_lines()
                endpoint = ""
                async for line in lines:
                    if line.startswith("data: "):
                        endpoint = line[len("data: "):]
                        break
                posted = await http.post(f"{gw.url}{endpoint}", json=INIT, headers=bearer(mallory))
                assert posted.status_code == 404
                posted = await http.post(f"{gw.url}{endpoint}", json=INIT, headers=bearer(alice))
                assert posted.status_code == 202


async def test_streams_end_when_the_token_expires(home: Path) -> None:
    """A GET /mcp notification stream and a /sse stream opened with a token expiring in a few
    seconds (tolerance 0) end by themselves."""
    with trio.fail_after(90):
        async with authenticated(home, rsa_key("k1"), clockToleranceSec=0) as (_, gw, signer), \
                httpx2.AsyncClient(timeout=60) as http:
            short = signer.token(exp=int(time.time()) + 3)
            session_id = (await initialize(http, gw.url, short)).headers["mcp-session-id"]
            for path, headers in [("/mcp", {"mcp-session-id": session_id}), ("/sse", {})]:
                if path == "/sse":
                    short = signer.token(exp=int(time.time()) + 3)
                with trio.fail_after(30):
                    sse = {**headers, "accept": "text/event-stream", "authorization": f"Bearer {short}"}
                    async with http.stream("GET", f"{gw.url}{path}", headers=sse) as s:
                        assert s.status_code == 200, path
                        async for _ in s.aiter_bytes():
                            pass  # ends when the gateway ends the stream


async def test_a_streamed_call_ends_when_the_token_expires(home: Path) -> None:
    """A streamed POST (a call with a progress token) outliving its token is cut at the expiry."""
    mock = [sys.executable, "-m", "tfunnel.testing.mock_upstream", "--tools", "slow"]
    set_upstreams(home, {"id": "rec", "command": mock[0], "args": mock[1:]})
    with trio.fail_after(90):
        async with authenticated(home, rsa_key("k1"), clockToleranceSec=0) as (_, gw, signer), \
                httpx2.AsyncClient(timeout=60) as http:
            short = signer.token(exp=int(time.time()) + 4)
            session_id = (await initialize(http, gw.url, short)).headers["mcp-session-id"]
            call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
                "name": "toolfunnel_run_tool", "arguments": {"name": "rec_slow", "args": {"seconds": 300}},
                "_meta": {"progressToken": "p"}}}
            with trio.fail_after(30):
                async with http.stream("POST", f"{gw.url}/mcp", json=call,
                                       headers={**bearer(short), "mcp-session-id": session_id}) as s:
                    body = b"".join([chunk async for chunk in s.aiter_bytes()])
            # Cut before it said anything (204), or its stream ended: never the call's answer.
            assert s.status_code in (200, 204) and b"slept" not in body and b"result" not in body
