"""Per-client profiles through the official SDK client, the gateway in-process
(`tfunnel.testing.gateway`): two clients of one gateway see different surfaces, and the restricted
one cannot run a hidden tool by any path (meta-tool, direct name, curated name); a refused call
never ran (its side-effect file never appears). `serve --profile` over the SDK's real stdio
transport to a `tfunnel serve` process is in tests/e2e/test_profiles_sdk.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import Implementation, TextContent

from tests.authserver import ec_key
from tests.test_auth_http import authenticated
from tests.test_gate_cancel_audit import audit_records, enable_audit
from tests.upstreams import mock_upstream, set_upstreams
from tfunnel.testing.cli import run
from tfunnel.testing.gateway import http_gateway

pytestmark = pytest.mark.timeout(120)

META = ["toolfunnel_list_tools", "toolfunnel_tool_instructions", "toolfunnel_run_tool", "toolfunnel_howto"]
PROFILES = [
    {"name": "narrow", "match": {"clientName": "narrow-*"}, "upstreams": ["mock"],
     "tools": ["mock_*", "echo"], "alwaysLoad": ["mock_echo"]},
    {"name": "wide", "match": {"clientName": "wide-*"}, "mode": "full"},
]


def make_home(home: Path, marker: Path) -> None:
    set_upstreams(home, mock_upstream("mock", description="The mock upstream."),
                  mock_upstream("other", description="The other upstream."),
                  expose=[{"upstream": "other", "tool": "echo", "as": "other_say"}])
    settings = json.loads((home / "toolfunnel.json").read_text())
    (home / "toolfunnel.json").write_text(json.dumps({**settings, "profiles": PROFILES}))
    register_path = home / "tools" / "tools.register.json"
    register = json.loads(register_path.read_text())
    register["tools"].append({"id": "mark", "name": "Mark", "summary": "Leaves a file behind.",
                              "invoke": {"type": "shell", "command": f"touch {marker}"},
                              "inputSchema": {"type": "object"}})
    register_path.write_text(json.dumps(register))
    enable_audit(home)


def client(url: str | StdioServerParameters, name: str, mode: str = "legacy") -> Client:
    return Client(url, mode=mode, cache=None,
                  client_info=Implementation(name=name, version="1"))


def text(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def names_once(session: Client, expected: str) -> list[str]:
    """The top-level names once `expected` is among them (its upstream came up), bounded."""
    with trio.fail_after(30):
        while expected not in (names := [t.name for t in (await session.list_tools()).tools]):
            await trio.sleep(0.1)
    return names


async def refused(session: Client, name: str, args: dict[str, Any]) -> str:
    """The text of a refusal: an error result, or the protocol error for an unknown tool."""
    try:
        result = await session.call_tool(name, args)
    except MCPError as exc:
        return exc.error.message
    assert result.is_error, f"{name} {args} ran: {result.content}"
    return text(result)


async def test_two_clients_see_two_surfaces_and_the_narrow_one_cannot_reach_a_hidden_tool(
        home: Path, tmp_path: Path) -> None:
    marker = tmp_path / "marked"
    make_home(home, marker)
    async with http_gateway(home) as gw:
        url = f"{gw.url}/mcp"
        for mode in ("legacy", "auto"):  # both eras: the legacy session's profile, a modern request's
            async with client(url, "wide-app", mode) as wide, client(url, "narrow-app", mode) as narrow:
                wide_names = [t.name for t in (await wide.list_tools()).tools]
                assert wide_names[:4] == META
                assert {"echo", "hash", "mark", "mock_echo", "other_add", "other_say"} <= set(wide_names)
                assert [t.name for t in (await narrow.list_tools()).tools] == [*META, "mock_echo"]
                # The server instructions name only the upstreams the profile allows.
                assert "The other upstream." in (wide.instructions or "")
                assert "The mock upstream." in (narrow.instructions or "")
                assert "The other upstream." not in (narrow.instructions or "")

                listed = json.loads(text(await narrow.call_tool("toolfunnel_list_tools", {"limit": 500})))
                ids = {b["id"] for b in listed}
                assert "echo" in ids and "mock_add" in ids
                assert not ids & {"hash", "mark", "other_add", "other_say"}
                searched = json.loads(text(await narrow.call_tool("toolfunnel_list_tools",
                                                                  {"query": "echo"})))
                assert {b["id"] for b in searched} <= ids

                for name, args in (("other_say", {"text": "x"}), ("mark", {}), ("other_add", {}),
                                   ("toolfunnel_run_tool", {"name": "mark"}),
                                   ("toolfunnel_run_tool", {"name": "Mark"}),
                                   ("toolfunnel_run_tool", {"name": "other_say", "args": {"text": "x"}}),
                                   ("toolfunnel_run_tool", {"name": "other_add", "args": {}}),
                                   ("toolfunnel_tool_instructions", {"name": "other_say"}),
                                   ("toolfunnel_tool_instructions", {"name": "mark"})):
                    message = await refused(narrow, name, args)
                    assert "other" not in message.replace(name, "") or "no tool" in message.lower(), message
                assert not marker.exists(), "a tool outside the profile ran"

                ok = await narrow.call_tool("toolfunnel_run_tool",
                                            {"name": "mock_echo", "args": {"text": "hi"}})
                assert not ok.is_error and "hi" in text(ok)
                assert not (await narrow.call_tool("mock_echo", {"text": "hi"})).is_error

                # The same tools run for the wide client: the refusals were the profile's.
                assert not (await wide.call_tool("other_say", {"text": "x"})).is_error
                assert not (await wide.call_tool("mark", {})).is_error
                with trio.fail_after(10):
                    while not marker.exists():
                        await trio.sleep(0.05)
                marker.unlink()
        # Token telemetry is per profile: each profile's tools/list as its clients got it.
        with trio.fail_after(30):
            async with httpx2.AsyncClient(timeout=10) as http:
                while len(sizes := _gauges((await http.get(f"{gw.url}/metrics")).text,
                                           "tfunnel_tokens_tools_list")) < 4:
                    await trio.sleep(0.05)
        assert sizes["narrow", "full"] < sizes["wide", "full"]  # fewer tools in the profile
        assert sizes["narrow", "lean"] < sizes["wide", "lean"]  # wide: mode full, every tool top-level

    refusals = [r for r in audit_records(home) if r["type"] == "profile" and r["event"] == "refused"]
    assert {r["name"] for r in refusals} >= {"other_say", "mark", "Mark", "other_add"}
    assert {r["profile"] for r in refusals} == {"narrow"}
    connects = {r["client"].split("/")[0]: r for r in audit_records(home)
                if r["type"] == "client" and r["event"] == "connect"}
    assert connects["narrow-app"]["profile"] == "narrow" and connects["narrow-app"]["surface"] == "lean"
    assert connects["wide-app"]["profile"] == "wide" and connects["wide-app"]["surface"] == "full"


def _gauges(text: str, name: str) -> dict[tuple[str, str], float]:
    """`name{profile=..,surface=..} value` lines of /metrics, by (profile, surface)."""
    found = re.finditer(rf'^{name}{{profile="([^"]+)",surface="([^"]+)"}} (\S+)$', text, re.M)
    return {(m.group(1), m.group(2)): float(m.group(3)) for m in found}


def test_serve_profile_must_name_a_defined_profile(home: Path, tmp_path: Path) -> None:
    make_home(home, tmp_path / "marked")
    done = run(home, "serve", "--profile", "nope")
    assert done.returncode == 2
    assert "'nope' names no profile" in done.stderr and "narrow, wide" in done.stderr


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_token_scope_or_subject_chooses_the_profile(home: Path, mode: str) -> None:
    """Over authenticated HTTP the bearer token's scope or subject chooses the profile: the same
    client name sees two surfaces with two tokens, in both eras."""
    settings = json.loads((home / "toolfunnel.json").read_text())
    (home / "toolfunnel.json").write_text(json.dumps({**settings, "profiles": [
        {"name": "ops", "match": {"tokenScope": "mcp:ops"}, "mode": "full"},
        {"name": "robot", "match": {"tokenSubject": "robot-*"}, "tools": ["echo"], "alwaysLoad": ["echo"]},
    ]}))
    with trio.fail_after(100):
        async with authenticated(home, ec_key("k1")) as (_, gw, signer):
            seen = {}
            for who, token in (("ops", signer.token(scope="mcp:tools mcp:ops")),
                               ("robot", signer.token(sub="robot-7")),
                               ("plain", signer.token())):
                headers = {"authorization": f"Bearer {token}"}
                async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
                        Client(streamable_http_client(f"{gw.url}/mcp", http_client=http), mode=mode,
                               cache=None, client_info=Implementation(name="same-app", version="1")) as c:
                    seen[who] = [t.name for t in (await c.list_tools()).tools]
                    if who == "robot":
                        assert "hash" in await refused(c, "toolfunnel_run_tool",
                                                       {"name": "hash", "args": {"text": "x"}})
    assert seen["plain"] == META
    assert seen["robot"] == [*META, "echo"]
    assert {"echo", "hash", "demo_add"} <= set(seen["ops"])
