"""Authentication end to end: a real `tfunnel serve --http` on a temp home with
`auth/auth.config.json`, a local issuer serving discovery and a JWK Set, tokens minted with keys
generated at test time."""

from __future__ import annotations

import json
import subprocess
import sys
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
from tests.httpgw import HttpGateway, http_gateway
from tests.upstreams import set_upstreams
from tests.wire import gateway_argv

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


def _serve(home: Path, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*gateway_argv(home), "serve", *args], input=stdin, capture_output=True,
                          timeout=60, check=False)


def test_a_broken_auth_config_refuses_http_only(home: Path) -> None:
    """An invalid auth config: `serve --http` refuses naming file and field, `check` reports it,
    stdio `serve` still serves."""
    path = home / "auth" / "auth.config.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"enabled": True, "issuer": "https://as.example", "audience": AUDIENCE,
                                "algorithms": ["HS256"]}))
    refused = _serve(home, "--http", "--port", "0")
    assert refused.returncode == 1
    stderr = refused.stderr.decode()
    assert "auth/auth.config.json: field 'algorithms[0]': 'HS256' is refused" in stderr
    assert "refusing to start" in stderr
    check = subprocess.run([*gateway_argv(home), "check"], capture_output=True, timeout=60, check=False)
    assert check.returncode == 1 and b"auth/auth.config.json: field 'algorithms[0]'" in check.stdout
    path.write_text('{"enabled": true, "issuer": ')
    assert b"auth/auth.config.json: invalid JSON" in _serve(home, "--http", "--port", "0").stderr
    line = json.dumps(INIT).encode() + b"\n"
    stdio = _serve(home, stdin=line)
    assert stdio.returncode == 0, stdio.stderr.decode()
    assert json.loads(stdio.stdout.splitlines()[0])["result"]["serverInfo"]["name"] == "tfunnel"


def test_a_non_loopback_bind_needs_authentication(home: Path) -> None:
    """`--host 0.0.0.0` without auth is refused before anything listens, naming the remedy."""
    refused = _serve(home, "--http", "--host", "0.0.0.0", "--port", "0")
    assert refused.returncode == 1
    assert b"refusing to listen on '0.0.0.0' without authentication" in refused.stderr
    assert b"auth/auth.config.json" in refused.stderr
