"""Real clients' sessions, replayed: what the official Python SDK and the MCP Inspector (0.15 and
2.12) sent to a real server (`tests/field/clients/`, recorded on the wire; NOTE.md there says how
and when), sent as they sent it to the in-process gateway, over stdio and Streamable HTTP, both
eras. The gateway serves a tool of the recorded server's name and schema (`get_current_time`,
hot), so every recorded request has something to answer; each must be answered as the server
answered it: the same id (a string id included), a result where it gave a result, the same HTTP
status, one compact line per message on stdio."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.conftest import add_tools
from tfunnel.testing.gateway import http_gateway, stdio_gateway

pytestmark = pytest.mark.timeout(60)

FIELD = Path(__file__).resolve().parent / "field" / "clients"
STDIO = sorted(path.name for path in FIELD.glob("*-stdio-*.jsonl"))
HTTP = sorted(path.name for path in FIELD.glob("*-http-*.jsonl"))
# The recorded server's tool, served by the gateway under its own name.
CURRENT_TIME = {
    "id": "get_current_time", "name": "get_current_time", "summary": "The current time in a timezone.",
    "invoke": {"type": "script", "path": "tools/scripts/current_time.py"},
    "inputSchema": {"type": "object", "properties": {"timezone": {"type": "string"}},
                    "required": ["timezone"]},
}
SCRIPT = """import datetime, json, os
args = json.loads(os.environ["TOOLFUNNEL_TOOL_ARGS"])
print(json.dumps({"timezone": args["timezone"], "datetime": datetime.datetime.now().isoformat()}))
"""


def recorded(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (FIELD / name).read_text().splitlines() if line.strip()]


def serving_the_recorded_tool(home: Path) -> Path:
    (home / "tools" / "scripts" / "current_time.py").write_text(SCRIPT)
    add_tools(home, CURRENT_TIME)
    (home / "tools" / "tools.state.json").write_text(json.dumps({"get_current_time": {"hot": True}}))
    return home


def test_the_recordings_cover_both_transports_both_eras_and_each_client() -> None:
    """What this module replays: each client over stdio, the SDK and an Inspector over HTTP, in
    both eras (a fixture refresh that lost one fails here, not silently)."""
    assert {name.split("-stdio-")[0] for name in STDIO} == {"python-sdk", "inspector-v0", "inspector-v2"}
    assert {name.split("-http-")[0] for name in HTTP} >= {"python-sdk", "inspector-v2"}
    for names in (STDIO, HTTP):
        assert any("2025-11-25" in n for n in names) and any("2026-07-28" in n for n in names)


def stdio_pairs(name: str) -> Iterator[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Each message the client wrote (its raw line), with the server's answer to it (None for a
    notification)."""
    messages = recorded(name)
    answers = {json.dumps(json.loads(m["raw"]).get("id")): json.loads(m["raw"])
               for m in messages if m["dir"] == "s2c" and "method" not in json.loads(m["raw"])}
    for message in messages:
        if message["dir"] == "c2s":
            sent = json.loads(message["raw"])
            yield message, answers.get(json.dumps(sent["id"])) if "id" in sent else None


@pytest.mark.parametrize("name", STDIO)
async def test_a_recorded_stdio_session_is_answered_as_the_server_answered_it(home: Path, name: str) -> None:
    """Every line the client wrote, replayed byte for byte: each request answered once, with its
    own id, a result where the server gave one; every answer one compact JSON line."""
    async with stdio_gateway(serving_the_recorded_tool(home)) as wire:
        for message, theirs in stdio_pairs(name):
            await wire.stdin.send_all(message["raw"].encode())
            if theirs is None:
                continue
            sent = json.loads(message["raw"])
            ours = await wire.reply_to(sent["id"])
            assert ours["id"] == sent["id"] and type(ours["id"]) is type(sent["id"])
            assert ("result" in ours) == ("result" in theirs), (sent.get("method"), ours)
        await wire.expect_no_reply(0.2)  # nothing unasked: each request had exactly its one answer


async def test_stdio_answers_are_single_compact_lines(home: Path) -> None:
    """The Python SDK's legacy session: what the gateway writes parses line by line (the SDK's
    reader), one message a line, with nothing between lines."""
    async with stdio_gateway(serving_the_recorded_tool(home)) as wire:
        for message, _ in stdio_pairs("python-sdk-stdio-2025-11-25.jsonl"):
            await wire.stdin.send_all(message["raw"].encode())
        await wire.close_stdin()
        out = bytearray()
        while chunk := await wire.stdout.receive_some(65536):
            out += chunk
    lines = bytes(out).split(b"\n")
    assert lines[-1] == b"" and all(lines[:-1])
    assert [json.loads(line)["id"] for line in lines[:-1]] == [1, 2, 3]


def _request_headers(recorded_headers: dict[str, str], session: str | None, theirs: str | None,
                     ) -> dict[str, str]:
    """The client's headers as it sent them, but for what belongs to the recording's connection
    (Host, Content-Length) and its session id, which becomes ours."""
    skip = {"host", "content-length", "connection", "accept-encoding"}
    headers = {k: v for k, v in recorded_headers.items() if k.lower() not in skip}
    for key in list(headers):
        if key.lower() == "mcp-session-id" and theirs is not None:
            assert headers[key] == theirs
            headers[key] = session or ""
    return headers


def http_pairs(name: str) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Each request the client made, with the server's response to it: the first one not yet
    taken with its method and path that answers it (its JSON-RPC id in the body; a notification's
    is a bodiless 202). Responses are in the order their bodies ended, so a GET stream's comes late."""
    messages = recorded(name)
    responses = [m for m in messages if m["dir"] == "s2c"]
    for request in (m for m in messages if m["dir"] == "c2s"):
        sent = json.loads(request["body"]) if request["body"] else {}
        for response in responses:
            if (response["method"], response["path"]) != (request["method"], request["path"]):
                continue
            if request["method"] == "POST" and ("id" in sent) != (_jsonrpc(response["body"], sent.get("id"))
                                                                  is not None):
                continue
            responses.remove(response)
            yield request, response
            break
        else:
            raise AssertionError(f"{name}: no recorded answer to {request['method']} {request['body'][:80]}")


@pytest.mark.parametrize("name", HTTP)
async def test_a_recorded_http_session_is_answered_as_the_server_answered_it(home: Path, name: str) -> None:
    """Every request the client made, with its own headers (its session id swapped for ours): the
    same status as the server's (200 for requests, 202 for notifications, a 200 event stream for
    GET), a session id on the initialize answer when the server gave one, each JSON-RPC request
    answered with its id and a result where the server gave one."""
    pairs = list(http_pairs(name))
    theirs_session = next((r["headers"]["mcp-session-id"] for _, r in pairs
                           if "mcp-session-id" in r["headers"]), None)
    session: str | None = None
    async with http_gateway(serving_the_recorded_tool(home)) as gw, httpx2.AsyncClient(timeout=20) as http:
        for request, answer in pairs:
            headers = _request_headers(request["headers"], session, theirs_session)
            url = f"{gw.url}{request['path']}"
            if request["method"] == "GET":
                async with http.stream("GET", url, headers=headers) as stream:
                    assert stream.status_code == answer["status"] == 200
                    assert stream.headers["content-type"].startswith("text/event-stream")
                continue
            reply = await http.request(request["method"], url, content=request["body"].encode(),
                                       headers=headers)
            assert reply.status_code == answer["status"], (request["body"], reply.text)
            if "mcp-session-id" in answer["headers"] and session is None:
                session = reply.headers["mcp-session-id"]
            sent = json.loads(request["body"]) if request["body"] else {}
            if "id" in sent:
                ours, server = _jsonrpc(reply.text, sent["id"]), _jsonrpc(answer["body"], sent["id"])
                assert ours is not None and ("result" in ours) == ("result" in server), (sent["method"], ours)


def _jsonrpc(body: str, request_id: Any) -> Any:
    """The JSON-RPC answer to `request_id` in a JSON body or an SSE stream's data lines."""
    candidates = []
    if body.lstrip().startswith("{"):
        candidates.append(json.loads(body))
    else:
        candidates += [json.loads(line[5:]) for line in body.replace("\r\n", "\n").split("\n")
                       if line.startswith("data:") and line[5:].strip()]
    for message in candidates:
        if isinstance(message, dict) and "method" not in message and message.get("id", ...) == request_id:
            return message
    return None
