"""The admin UI's guard (pure): the bind rule, the Host rule and the CSRF rule, table-driven."""

from __future__ import annotations

import pytest

from tfunnel.ui import guard
from tfunnel.ui.live import changed_views
from tfunnel.ui.views import passes

TOKEN = "t0ken-of-this-process"
HOST = "127.0.0.1:9777"
GOOD_POST = {"host": HOST, "origin": f"http://{HOST}", "content-type": "application/json",
             "x-tfunnel-csrf": TOKEN, "sec-fetch-site": "same-origin"}


@pytest.mark.parametrize(("host", "refused"), [
    ("127.0.0.1", False), ("::1", False), ("localhost", False), ("127.1.2.3", False),
    ("0.0.0.0", True), ("::", True), ("192.168.1.10", True), ("example.com", True),
    ("127.0.0.1.nip.io", True), ("localhost.", True), ("", True),
])
def test_bind_is_loopback_only(host: str, refused: bool) -> None:
    refusal = guard.bind_refusal(host)
    assert (refusal is not None) is refused
    if refused:
        assert refusal is not None and "SSH tunnel" in refusal and repr(host) in refusal


@pytest.mark.parametrize(("method", "changes", "expected"), [
    # Reads need only a loopback Host.
    ("GET", {}, None),
    ("GET", {"origin": "http://evil.example", "x-tfunnel-csrf": None}, None),
    ("HEAD", {}, None),
    ("GET", {"host": "evil.example:9777"}, guard.HOST_REFUSED),
    ("GET", {"host": "127.0.0.1.nip.io:9777"}, guard.HOST_REFUSED),
    ("GET", {"host": None}, guard.HOST_REFUSED),
    ("GET", {"host": "127.0.0.1:9777,evil.example"}, guard.HOST_REFUSED),  # a repeated Host, joined
    # A change from our own page.
    ("POST", {}, None),
    ("POST", {"origin": None, "sec-fetch-site": None}, None),  # not a browser: the token decides
    ("POST", {"content-type": "application/json; charset=utf-8"}, None),
    ("POST", {"origin": "http://LOCALHOST:9777", "host": "localhost:9777"}, None),
    # Cross-origin, loopback ones included.
    ("POST", {"origin": "http://evil.example"}, guard.CROSS_ORIGIN),
    ("POST", {"origin": "http://127.0.0.1:3000"}, guard.CROSS_ORIGIN),
    ("POST", {"origin": "http://localhost:9777"}, guard.CROSS_ORIGIN),  # not the Host the page used
    ("POST", {"origin": "https://127.0.0.1:9777"}, guard.CROSS_ORIGIN),
    ("POST", {"origin": "null"}, guard.CROSS_ORIGIN),
    ("POST", {"sec-fetch-site": "cross-site"}, guard.CROSS_ORIGIN),
    ("POST", {"sec-fetch-site": "same-site"}, guard.CROSS_ORIGIN),
    ("POST", {"host": "evil.example:9777", "origin": "http://evil.example:9777"}, guard.HOST_REFUSED),
    # What a form could send, and the token.
    ("POST", {"content-type": "text/plain"}, guard.NOT_JSON),
    ("POST", {"content-type": "application/x-www-form-urlencoded"}, guard.NOT_JSON),
    ("POST", {"content-type": None}, guard.NOT_JSON),
    ("POST", {"x-tfunnel-csrf": None}, guard.BAD_TOKEN),
    ("POST", {"x-tfunnel-csrf": ""}, guard.BAD_TOKEN),
    ("POST", {"x-tfunnel-csrf": TOKEN + "x"}, guard.BAD_TOKEN),
    ("POST", {"x-tfunnel-csrf": TOKEN[:-1]}, guard.BAD_TOKEN),
    ("POST", {"x-tfunnel-csrf": f"{TOKEN},{TOKEN}"}, guard.BAD_TOKEN),  # a repeated header, joined
    ("POST", {"x-tfunnel-csrf": "ünïcode"}, guard.BAD_TOKEN),
    # Nothing else changes anything.
    ("PUT", {}, guard.METHOD), ("DELETE", {}, guard.METHOD), ("PATCH", {}, guard.METHOD),
])
def test_request_rule(method: str, changes: dict[str, str | None], expected: guard.Refusal | None) -> None:
    headers = {**GOOD_POST, **changes}
    given = {k: v for k, v in headers.items() if v is not None}
    assert guard.check(method, given, TOKEN) == expected


@pytest.mark.parametrize(("changes", "given_token", "expected"), [
    ({}, TOKEN, None),
    ({}, None, guard.BAD_TOKEN),
    ({}, "wrong", guard.BAD_TOKEN),
    ({"origin": None}, TOKEN, guard.CROSS_ORIGIN),  # a browser always sends it on a WebSocket
    ({"origin": "http://evil.example"}, TOKEN, guard.CROSS_ORIGIN),
    ({"origin": "http://127.0.0.1:3000"}, TOKEN, guard.CROSS_ORIGIN),
    ({"host": "evil.example"}, TOKEN, guard.HOST_REFUSED),
])
def test_websocket_rule(changes: dict[str, str | None], given_token: str | None,
                        expected: guard.Refusal | None) -> None:
    headers = {"host": HOST, "origin": f"http://{HOST}", **changes}
    given = {k: v for k, v in headers.items() if v is not None}
    assert guard.check("GET", given, TOKEN, websocket=True, given_token=given_token) == expected


def test_an_empty_token_never_matches() -> None:
    assert guard.check("POST", {**GOOD_POST, "x-tfunnel-csrf": ""}, "") == guard.BAD_TOKEN


@pytest.mark.parametrize(("files", "upstreams", "tools", "expected"), [
    ([], False, False, []),
    (["tools/tools.state.json"], False, False, ["upstreams", "tools", "surface"]),
    (["hooks/hooks.state.json"], False, False, ["tools", "hooks"]),
    (["toolfunnel.json"], False, False, ["settings"]),
    (["mcp/tool-approvals.json"], False, False, ["tools", "surface", "approvals"]),
    (["somewhere/else.json"], False, False, []),
    ([], True, False, ["upstreams"]),
    ([], True, True, ["upstreams", "tools", "surface"]),
])
def test_what_each_change_reloads(files: list[str], upstreams: bool, tools: bool,
                                  expected: list[str]) -> None:
    assert changed_views(files, upstreams, tools) == expected


@pytest.mark.parametrize(("record", "kinds"), [
    ({"type": "gate", "decision": "deny"}, {"all", "deny"}),
    ({"type": "tool", "ok": False, "denied": True}, {"all", "deny", "error"}),
    ({"type": "gate", "decision": "ask"}, {"all", "ask"}),
    ({"type": "gate", "decision": "allow", "asked": True}, {"all", "ask"}),
    ({"type": "gate", "decision": "deny", "asked": True}, {"all", "ask", "deny"}),
    ({"type": "tool", "ok": True}, {"all"}),
    ({"type": "mcp", "event": "crashed", "error": "exit 1"}, {"all", "error"}),
    ({"type": "config", "via": "ui"}, {"all"}),
])
def test_activity_filters(record: dict[str, object], kinds: set[str]) -> None:
    assert {kind for kind in ("all", "deny", "ask", "error") if passes(record, kind)} == kinds
