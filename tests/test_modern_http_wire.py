"""The modern era on the raw HTTP wire: every error code and status of PROTOCOL.md §3.11.

One gateway, in-process (`tfunnel.testing.gateway`) on a real loopback port, answers a table of
hand-built POSTs; each row names the headers, the body and the status/code it must get.
"""

from __future__ import annotations

import base64
import json
import signal
from pathlib import Path
from typing import Any

import h11
import httpx2
import pytest
import trio

from tests.conftest import add_tools
from tests.h11wire import next_message
from tfunnel.testing.gateway import http_gateway

pytestmark = pytest.mark.timeout(120)

V = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def b64(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


def body(method: str, params: dict[str, Any] | None = None, meta: dict[str, Any] | None = None,
         ) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": method,
            "params": {**(params or {}), "_meta": META if meta is None else meta}}


def headers(method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    out = {**ACCEPT, "mcp-protocol-version": V, "mcp-method": method}
    if name is not None:
        out["mcp-name"] = name
    return {**out, **extra}


CALL = {"name": "toolfunnel_howto", "arguments": {"topic": "add-tool"}}
NO_CAPS = {k: v for k, v in META.items() if k != "io.modelcontextprotocol/clientCapabilities"}
NO_VERSION = {k: v for k, v in META.items() if k != "io.modelcontextprotocol/protocolVersion"}

# (case, request headers, body, HTTP status, JSON-RPC error code or None for a result)
CASES: list[tuple[str, dict[str, str], dict[str, Any], int, int | None]] = [
    ("discover", headers("server/discover"), body("server/discover"), 200, None),
    ("tools/list", headers("tools/list"), body("tools/list"), 200, None),
    ("tools/call", headers("tools/call", "toolfunnel_howto"), body("tools/call", CALL), 200, None),
    ("base64 Mcp-Name", headers("tools/call", b64("toolfunnel_howto")), body("tools/call", CALL), 200, None),
    ("missing clientCapabilities", headers("tools/list"), body("tools/list", meta=NO_CAPS), 400, -32602),
    ("missing _meta version, modern header", headers("tools/list"), body("tools/list", meta=NO_VERSION),
     400, -32602),
    ("unsupported version", headers("tools/list", **{"mcp-protocol-version": "2099-01-01"}),
     body("tools/list", meta={**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}), 400, -32022),
    ("version header differs from body", headers("tools/list", **{"mcp-protocol-version": "2099-01-01"}),
     body("tools/list"), 400, -32020),
    ("Mcp-Method missing", {**ACCEPT, "mcp-protocol-version": V}, body("tools/list"), 400, -32020),
    ("Mcp-Method differs", headers("tools/call", "toolfunnel_howto"), body("tools/list"), 400, -32020),
    ("Mcp-Name missing", headers("tools/call"), body("tools/call", CALL), 400, -32020),
    ("Mcp-Name differs", headers("tools/call", "other"), body("tools/call", CALL), 400, -32020),
    ("base64 Mcp-Name differs", headers("tools/call", b64("other")), body("tools/call", CALL), 400, -32020),
    ("bad base64", headers("tools/call", "=?base64?***?="), body("tools/call", CALL), 400, -32020),
    ("unknown method", headers("no/such"), body("no/such"), 404, -32601),
    ("removed method ping", headers("ping"), body("ping"), 404, -32601),
    ("removed logging/setLevel", headers("logging/setLevel"), body("logging/setLevel", {"level": "info"}),
     404, -32601),
    ("unknown tool", headers("tools/call", "nope"), body("tools/call", {"name": "nope", "arguments": {}}),
     400, -32602),
    ("bad logLevel", headers("tools/list"),
     body("tools/list", meta={**META, "io.modelcontextprotocol/logLevel": "loud"}), 400, -32602),
    ("tampered requestState", headers("tools/call", "toolfunnel_howto"),
     body("tools/call", {**CALL, "requestState": "v1.eyJ4IjoxfQ.AAAA", "inputResponses": {}}), 400, -32602),
    ("bogus session id is ignored", headers("tools/list", **{"mcp-session-id": "bogus"}), body("tools/list"),
     200, None),
]


async def test_modern_post_table(home: Path) -> None:
    async with http_gateway(home) as gateway:
        failures = []
        async with httpx2.AsyncClient(timeout=10) as http:
            for case, hdrs, payload, status, code in CASES:
                reply = await http.post(f"{gateway.url}/mcp", json=payload, headers=hdrs)
                got = reply.json()
                got_code = got.get("error", {}).get("code")
                if reply.status_code != status or got_code != code:
                    failures.append(f"{case}: {reply.status_code} {got}")
                assert "mcp-session-id" not in reply.headers, case  # no session is minted
        assert failures == []


async def test_results_carry_result_type_cache_hints_and_server_info(home: Path) -> None:
    async with http_gateway(home) as gateway, httpx2.AsyncClient(timeout=10) as http:
            discover = (await http.post(f"{gateway.url}/mcp", json=body("server/discover"),
                                        headers=headers("server/discover"))).json()["result"]
            assert discover["supportedVersions"] == [V]
            assert discover["resultType"] == "complete" and discover["cacheScope"] == "private"
            assert discover["ttlMs"] >= 0 and discover["capabilities"]["tools"] == {"listChanged": True}
            assert discover["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "tfunnel"
            listed = (await http.post(f"{gateway.url}/mcp", json=body("tools/list"),
                                      headers=headers("tools/list"))).json()["result"]
            assert listed["resultType"] == "complete" and "ttlMs" in listed and "cacheScope" in listed
            called = (await http.post(f"{gateway.url}/mcp", json=body("tools/call", CALL),
                                      headers=headers("tools/call", "toolfunnel_howto"))).json()["result"]
            assert called["resultType"] == "complete" and "ttlMs" not in called  # tools/call is not cacheable
            assert called["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "tfunnel"


async def test_unsupported_version_names_what_is_supported(home: Path) -> None:
    async with http_gateway(home) as gateway:
        meta = {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
        async with httpx2.AsyncClient(timeout=10) as http:
            reply = await http.post(f"{gateway.url}/mcp", json=body("tools/list", meta=meta),
                                    headers=headers("tools/list", **{"mcp-protocol-version": "2099-01-01"}))
        error = reply.json()["error"]
        assert error["data"] == {"supported": [V], "requested": "2099-01-01"}


async def test_get_and_delete_with_a_modern_header_are_405(home: Path) -> None:
    async with http_gateway(home) as gateway, httpx2.AsyncClient(timeout=10) as http:
            modern = {"accept": "text/event-stream", "mcp-protocol-version": V}
            for reply in (await http.get(f"{gateway.url}/mcp", headers=modern),
                          await http.delete(f"{gateway.url}/mcp", headers=modern)):
                assert reply.status_code == 405 and reply.headers["allow"] == "POST"


async def test_a_modern_notification_is_accepted_with_202(home: Path) -> None:
    async with http_gateway(home) as gateway:
        note = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": 3, "_meta": META}}
        async with httpx2.AsyncClient(timeout=10) as http:
            reply = await http.post(f"{gateway.url}/mcp", json=note,
                                    headers=headers("notifications/cancelled"))
        assert reply.status_code == 202


async def test_listen_over_sse_acknowledges_first_and_ends_gracefully_on_shutdown(home: Path) -> None:
    """The ack is the first event, tagged with the subscription id; SIGTERM ends the stream with
    the final result (not a torn connection)."""
    listen = {"jsonrpc": "2.0", "id": "L1", "method": "subscriptions/listen",
              "params": {"notifications": {"toolsListChanged": True, "promptsListChanged": True},
                         "_meta": META}}
    async with http_gateway(home) as gw, httpx2.AsyncClient(timeout=30) as http:
        events: list[dict[str, Any]] = []
        async with http.stream("POST", f"{gw.url}/mcp", json=listen,
                               headers=headers("subscriptions/listen")) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            async for line in stream.aiter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(json.loads(line[6:]))
                if len(events) == 1:
                    gw.signal(signal.SIGTERM)
        await gw.wait_exit(20)
    ack, final = events[0], events[-1]
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "L1"
    # Each list the gateway serves is honoured, whatever its upstreams have.
    assert ack["params"]["notifications"] == {"toolsListChanged": True, "promptsListChanged": True}
    assert final["id"] == "L1" and final["result"]["resultType"] == "complete"
    assert final["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "L1"


async def test_mcp_name_with_surrounding_whitespace_is_accepted(home: Path) -> None:
    """RFC 9110 field parsing: OWS around a header value is not part of it (sent on a raw socket,
    since well-behaved clients refuse to send it)."""
    payload = json.dumps(body("tools/call", CALL)).encode()
    async with http_gateway(home) as gateway:
        host, port = gateway.url.removeprefix("http://").rsplit(":", 1)
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            head = (f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\n"
                    "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
                    f"MCP-Protocol-Version: {V}\r\nMcp-Method: tools/call\r\n"
                    "Mcp-Name: \t toolfunnel_howto \t\r\n"
                    f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n")
            await stream.send_all(head.encode() + payload)
            reply = b""
            with trio.fail_after(10):
                while chunk := await stream.receive_some(65536):
                    reply += chunk
    assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
    assert b'"resultType":"complete"' in reply.replace(b" ", b"")


async def test_mcp_param_headers_are_checked_against_the_tool_schema(home: Path) -> None:
    """A hot tool whose inputSchema mirrors `region` (string) and `count` (integer) into headers:
    the headers must be present and agree with the body (integers compared as numbers)."""
    add_tools(home, {"id": "mirror", "name": "Mirror", "summary": "Echoes (test).",
                     "invoke": {"type": "script", "path": "tools/scripts/echo.py"},
                     "inputSchema": {"type": "object", "properties": {
                         "region": {"type": "string", "x-mcp-header": "Region"},
                         "count": {"type": "integer", "x-mcp-header": "Count"}}}})
    (home / "tools" / "tools.state.json").write_text(json.dumps({"mirror": {"hot": True}}))
    call = body("tools/call", {"name": "mirror", "arguments": {"region": "eu-west", "count": 3}})
    base = headers("tools/call", "mirror")
    cases = [({"mcp-param-region": "eu-west", "mcp-param-count": "3"}, 200),
             ({"mcp-param-region": b64("eu-west"), "mcp-param-count": "03"}, 200),
             ({"mcp-param-count": "3"}, 400),
             ({"mcp-param-region": "us-east", "mcp-param-count": "3"}, 400),
             ({"mcp-param-region": "eu-west", "mcp-param-count": "4"}, 400)]
    async with http_gateway(home) as gateway, httpx2.AsyncClient(timeout=10) as http:
        for extra, status in cases:
            reply = await http.post(f"{gateway.url}/mcp", json=call, headers={**base, **extra})
            assert reply.status_code == status, (extra, reply.json())
            if status == 400:
                assert reply.json()["error"]["code"] == -32020
            else:
                assert json.loads(reply.json()["result"]["content"][0]["text"])["args"]["count"] == 3


async def test_an_error_before_any_stream_message_keeps_its_status(home: Path) -> None:
    """A request that would stream (it has a progressToken) but fails first is answered as JSON
    with the error's own status, not inside a 200 event stream."""
    meta = {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01", "progressToken": "p"}
    async with http_gateway(home) as gateway, httpx2.AsyncClient(timeout=10) as http:
        reply = await http.post(f"{gateway.url}/mcp", json=body("tools/list", meta=meta),
                                headers=headers("tools/list", **{"mcp-protocol-version": "2099-01-01"}))
        assert reply.status_code == 400 and reply.json()["error"]["code"] == -32022
        unknown = await http.post(f"{gateway.url}/mcp",
                                  json=body("tools/call", {"name": "nope", "arguments": {}},
                                            meta={**META, "progressToken": "p"}),
                                  headers=headers("tools/call", "nope"))
        assert unknown.status_code == 400 and unknown.json()["error"]["code"] == -32602


async def test_a_repeated_checked_header_is_refused(home: Path) -> None:
    """Two Mcp-Name values: a proxy could act on one while we check the other."""
    repeated = [(k, v) for k, v in headers("tools/call", "toolfunnel_howto").items()]
    repeated.insert(0, ("mcp-name", "other_tool"))
    async with http_gateway(home) as gateway, httpx2.AsyncClient(timeout=10) as http:
        reply = await http.post(f"{gateway.url}/mcp", json=body("tools/call", CALL), headers=repeated)
    assert reply.status_code == 400 and reply.json()["error"]["code"] == -32020


async def raw_exchange(url: str, requests: list[tuple[dict[str, str], bytes]],
                       ) -> list[tuple[h11.Response, bytes]]:
    """`requests` one after another on one keep-alive connection, parsed by h11 as a client:
    each response's head and body."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    client = h11.Connection(h11.CLIENT)
    answers: list[tuple[h11.Response, bytes]] = []
    async with stream:
        for hdrs, payload in requests:
            head = [("host", f"{host}:{port}"), ("content-length", str(len(payload))), *hdrs.items()]
            await stream.send_all(client.send(h11.Request(method="POST", target="/mcp", headers=head))
                                  + client.send(h11.Data(data=payload)) + client.send(h11.EndOfMessage()))
            message = await next_message(client, stream)
            assert message is not None
            response, data = message
            assert isinstance(response, h11.Response)
            answers.append((response, data))
            client.start_next_cycle()
    return answers


async def test_json_answers_say_their_length_and_keep_the_connection(home: Path) -> None:
    """A JSON answer (result or error) and a 202 carry Content-Length and no chunked encoding;
    four exchanges share one connection."""
    notification = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": 1, "_meta": META}}
    requests = [
        (headers("tools/call", "toolfunnel_howto"), json.dumps(body("tools/call", CALL)).encode()),
        (headers("no/such"), json.dumps(body("no/such")).encode()),
        (headers("notifications/cancelled"), json.dumps(notification).encode()),
        (headers("tools/list"), json.dumps(body("tools/list")).encode()),
    ]
    async with http_gateway(home) as gateway:
        with trio.fail_after(30):
            answers = await raw_exchange(gateway.url, requests)
    assert [response.status_code for response, _ in answers] == [200, 404, 202, 200]
    for response, data in answers:
        head = dict(response.headers)
        assert b"transfer-encoding" not in head
        assert head[b"content-length"] == str(len(data)).encode()
    assert json.loads(answers[0][1])["result"]["content"]
    assert json.loads(answers[1][1])["error"]["code"] == -32601
    assert "tools" in json.loads(answers[3][1])["result"]
