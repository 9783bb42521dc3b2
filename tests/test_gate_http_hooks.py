"""`type: "http"` hooks: the answer rules (pure, table-driven), the header rules, and the real
thing: a gateway (in-process, `tfunnel.testing`) POSTing to a loopback hook server started by the
test. What a real `tfunnel call` process writes (no secret on its stderr) is in
tests/e2e/test_gate_http_hooks.py."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import ssl
import subprocess
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.hooks import HookServer, answering, http_hook, pre_output, set_hooks
from tfunnel.gate.decision import HookVerdict, interpret
from tfunnel.gate.http_hook import HttpHooks, answer_run, expand_headers
from tfunnel.gate.manifest import HookSpec, describe, load_manifest
from tfunnel.gate.runner import HOOK_OUTPUT_CAP
from tfunnel.testing.cli import run as tfunnel
from tfunnel.testing.sdk import sdk_client, text

pytestmark = pytest.mark.timeout(90)

URL = "http://127.0.0.1:9/pre?token=abc"
SPEC = HookSpec(id="h", event="PreToolUse", command="", kind="http", url=URL)
FAIL_CLOSED = HookSpec(id="h", event="PreToolUse", command="", kind="http", url=URL, fail_closed=True)
ALLOW = json.dumps(pre_output("allow")).encode()
DENY = json.dumps(pre_output("deny", "http says no")).encode()

# --- the answer, as a verdict (pure) ---------------------------------------------------------------

ANSWERS: list[tuple[str, int, bytes | None, HookVerdict]] = [
    ("empty-200", 200, b"", HookVerdict("h", "none")),
    ("whitespace-204", 204, b"  \n", HookVerdict("h", "none")),
    ("allow", 200, ALLOW, HookVerdict("h", "allow")),
    ("deny", 200, DENY, HookVerdict("h", "deny", "http says no")),
    ("ask", 200, json.dumps(pre_output("ask", "sure?")).encode(), HookVerdict("h", "ask", "sure?")),
    ("updated-input", 201, json.dumps(pre_output("allow", updatedInput={"a": 1})).encode(),
     HookVerdict("h", "allow", updated_input={"a": 1})),
    ("context", 200, json.dumps({"hookSpecificOutput": {"additionalContext": "mind the gap"}}).encode(),
     HookVerdict("h", "none", additional_context="mind the gap")),
    ("legacy-block", 200, b'{"decision": "block", "reason": "old style"}',
     HookVerdict("h", "deny", "old style")),
    ("empty-object", 200, b"{}", HookVerdict("h", "none")),
    ("repeated-key", 200, b'{"decision": "block", "decision": "approve"}',
     HookVerdict("h", "deny", "hook h: unreadable decision (duplicate key 'decision'); denied")),
    ("broken-decision", 200, b'{"hookSpecificOutput": {"permissionDecision": "deny"',
     HookVerdict("h", "deny", "hook h: unreadable decision; denied")),
    ("over-cap", 200, None, HookVerdict("h", "deny", "hook h: output over the cap; denied")),
    ("plain-text", 200, b"hello", HookVerdict(
        "h", "none", error="hook h: POST http://127.0.0.1:9/pre answered HTTP 200 with a body that is not a "
                           "JSON object")),
    ("json-array", 200, b"[1]", HookVerdict(
        "h", "none", error="hook h: POST http://127.0.0.1:9/pre answered HTTP 200 with a body that is not a "
                           "JSON object")),
    ("500", 500, DENY, HookVerdict(
        "h", "none", error="hook h: POST http://127.0.0.1:9/pre answered HTTP 500 Internal Server Error")),
    ("redirect", 302, b"", HookVerdict(
        "h", "none", error="hook h: POST http://127.0.0.1:9/pre answered HTTP 302 Found (redirects are not "
                           "followed)")),
    ("odd-status", 299, b"", HookVerdict("h", "none")),
    ("unknown-status", 599, b"", HookVerdict(
        "h", "none", error="hook h: POST http://127.0.0.1:9/pre answered HTTP 599")),
]


@pytest.mark.parametrize(("status", "body", "expected"), [a[1:] for a in ANSWERS],
                         ids=[a[0] for a in ANSWERS])
def test_an_answer_reads_like_a_command_hooks_output(status: int, body: bytes | None,
                                                     expected: HookVerdict) -> None:
    """A 2xx JSON body is read by the command hooks' rules; empty is no opinion; an error status
    or a body that is not a JSON object is a non-blocking error naming the URL without its query."""
    assert interpret("PreToolUse", answer_run(SPEC, status, body)) == expected


@pytest.mark.parametrize(("status", "body", "decision"), [
    (500, b"", "deny"), (302, b"", "deny"), (200, b"hello", "deny"), (200, None, "deny"),
    (200, b"", "none"), (200, ALLOW, "allow"),
], ids=["500", "redirect", "not-json", "over-cap", "empty", "allow"])
def test_fail_closed_turns_no_answer_into_a_deny(status: int, body: bytes | None, decision: str) -> None:
    """With failClosed an http hook that did not answer denies; a real answer is kept."""
    verdict = interpret("PreToolUse", answer_run(FAIL_CLOSED, status, body))
    assert verdict.decision == decision


def test_post_tool_use_reads_context_not_permission() -> None:
    """A PostToolUse answer's permissionDecision means nothing; its context and block are read."""
    body = json.dumps({"decision": "block", "reason": "bad result",
                       "hookSpecificOutput": {"permissionDecision": "allow", "additionalContext": "x"}})
    verdict = interpret("PostToolUse", answer_run(SPEC, 200, body.encode()))
    assert verdict == HookVerdict("h", "deny", "bad result", additional_context="x")


# --- headers ---------------------------------------------------------------------------------------

ENV = {"TOKEN": "s3cr3t", "TEAM": "blue", "EMPTY": ""}


@pytest.mark.parametrize(("value", "allowed", "expected"), [
    ("Bearer $TOKEN", ("TOKEN",), "Bearer s3cr3t"),
    ("Bearer ${TOKEN}", ("TOKEN",), "Bearer s3cr3t"),
    ("$TOKEN-${TEAM}", ("TOKEN", "TEAM"), "s3cr3t-blue"),
    ("Bearer $TOKEN", (), "Bearer "),
    ("${TOKEN}/$TEAM", ("TEAM",), "/blue"),
    ("$UNSET", ("UNSET",), ""),
    ("$EMPTY!", ("EMPTY",), "!"),
    ("plain", (), "plain"),
    ("$5 and $", (), "$5 and $"),
    ("${TEAM", ("TEAM",), "${TEAM"),
], ids=["bare", "braced", "two", "unlisted-is-empty", "one-listed", "listed-unset", "listed-empty", "plain",
        "not-a-name", "unclosed"])
def test_headers_fill_only_the_allowed_variables(value: str, allowed: tuple[str, ...], expected: str) -> None:
    """$VAR and ${VAR} take the environment's value only when allowedEnvVars lists the name."""
    spec = HookSpec(id="h", event="PreToolUse", command="", kind="http", url=URL,
                    headers=(("X-A", value),), allowed_env_vars=allowed)
    assert expand_headers(spec, ENV) == {"X-A": expected}


def test_a_line_break_from_the_environment_is_refused_without_showing_it() -> None:
    """A variable whose value would split the header is not sent; the error names the header only."""
    spec = HookSpec(id="h", event="PreToolUse", command="", kind="http", url=URL,
                    headers=(("Authorization", "Bearer $T"),), allowed_env_vars=("T",))
    with pytest.raises(ValueError, match="'Authorization'") as caught:
        expand_headers(spec, {"T": "s3cr3t\r\nX-Evil: 1"})
    assert "s3cr3t" not in str(caught.value)


# --- the manifest ----------------------------------------------------------------------------------

def write_rows(home: Path, *rows: dict[str, Any]) -> None:
    (home / "hooks").mkdir(parents=True, exist_ok=True)
    full = [{"id": f"h{i}", "event": "PreToolUse", **r} for i, r in enumerate(rows)]
    (home / "hooks" / "hooks.manifest.json").write_text(json.dumps({"version": 1, "hooks": full}))


@pytest.mark.parametrize("url", ["http://127.0.0.1:8377/pre", "http://127.9.9.9/x", "http://localhost:1/",
                                 "http://[::1]:8080/hook", "https://hooks.example/pre?team=a",
                                 "https://10.0.0.5/pre"])
def test_http_rows_accept_https_and_loopback_http(tmp_path: Path, url: str) -> None:
    """An http row loads with https anywhere and http to a loopback host; no command needed."""
    write_rows(tmp_path, {"type": "http", "url": url, "timeout": 5, "failClosed": True, "enabled": True})
    spec = load_manifest(tmp_path).hooks[0]
    assert (spec.kind, spec.url, spec.timeout_s) == ("http", url, 5.0)
    assert spec.fail_closed and spec.enabled and spec.command == ""


def test_http_row_defaults_and_listing(tmp_path: Path) -> None:
    """The default timeout is the command hooks'; the listing shows header names, not values, and
    the URL without its query."""
    write_rows(tmp_path, {"type": "http", "url": "https://hooks.example/pre?key=QUERYSECRET",
                          "headers": {"Authorization": "Bearer $T"}, "allowedEnvVars": ["T"]})
    spec = load_manifest(tmp_path).hooks[0]
    assert spec.timeout_s == 60.0 and not spec.enabled
    assert describe(spec) == {"id": "h0", "event": "PreToolUse", "matcher": "*", "enabled": False,
                              "failClosed": False, "timeout": 60.0, "type": "http",
                              "url": "https://hooks.example/pre", "headers": ["Authorization"]}


def test_an_unlisted_variable_is_a_warning(home: Path) -> None:
    """`tfunnel check` warns (and so fails, as for every warning) about a header using a variable
    that allowedEnvVars does not list; the hook still loads."""
    set_hooks(home, http_hook("https://hooks.example/pre", headers={"X-Team": "$TEAM"}))
    done = tfunnel(home, "check")
    assert done.returncode == 1 and "0 problem(s) and 1 warning(s)" in done.stdout
    assert "warning: hooks/hooks.manifest.json: hooks[0] (id 'h0'): field 'headers.X-Team': uses $TEAM, " \
           "which allowedEnvVars does not list" in done.stdout
    assert load_manifest(home).hooks[0].headers == (("X-Team", "$TEAM"),)


def test_check_refuses_a_plain_http_remote_url(home: Path) -> None:
    """`tfunnel check` fails on an http hook to a remote host over plain http, naming the field."""
    set_hooks(home, http_hook("http://hooks.example/pre"))
    done = tfunnel(home, "check")
    assert done.returncode != 0
    assert "field 'url'" in done.stdout + done.stderr and "must use https" in done.stdout + done.stderr


# --- the client, on a real loopback server ---------------------------------------------------------

def spec_for(url: str, **fields: Any) -> HookSpec:
    return HookSpec(id="h", event="PreToolUse", command="", kind="http", url=url, **fields)


async def test_one_client_reuses_one_connection() -> None:
    """Several hooks in a row go over one kept-alive TCP connection, and the client closes."""
    hooks = HttpHooks()
    with HookServer(answering(200, pre_output("allow"))) as server:
        with trio.fail_after(30):
            for _ in range(5):
                run = await hooks.run(spec_for(server.url), {"n": 1}, {})
                assert interpret("PreToolUse", run).decision == "allow"
            await hooks.aclose()
        assert server.connections == 1 and len(server.requests) == 5
        path, headers, payload = server.requests[0]
        assert path == "/hook" and payload == {"n": 1}
        assert headers["Content-Type"] == "application/json"


async def test_timeout_and_cancel_end_the_request() -> None:
    """The hook's timeout is a no-answer (timed_out); a cancelled call cancels its request."""
    hooks = HttpHooks()
    with HookServer(answering(200, b"", delay=3.0)) as server:
        with trio.fail_after(30):
            run = await hooks.run(spec_for(server.url, timeout_s=0.2), {}, {})
            assert run.timed_out and interpret("PreToolUse", run).error == "hook h: timed out"
            with trio.move_on_after(0.2) as scope:
                await hooks.run(spec_for(server.url), {}, {})
            assert scope.cancelled_caught
            await hooks.aclose()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_a_refused_connection_is_no_answer() -> None:
    """Nothing listening: a non-blocking error that names the URL (a deny when failing closed)."""
    hooks = HttpHooks()
    url = f"http://127.0.0.1:{closed_port()}/pre"
    with trio.fail_after(30):
        run = await hooks.run(spec_for(url), {}, {})
        closed = await hooks.run(spec_for(url, fail_closed=True), {}, {})
        await hooks.aclose()
    expected = HookVerdict("h", "none", error=f"hook h: POST {url} could not connect")
    assert interpret("PreToolUse", run) == expected
    assert interpret("PreToolUse", closed).decision == "deny"


async def test_a_body_over_the_cap_denies() -> None:
    """A body over the command hooks' output cap is an unreadable decision: a deny."""
    hooks = HttpHooks()
    with HookServer(answering(200, b" " * (HOOK_OUTPUT_CAP + 10) + ALLOW)) as server:
        with trio.fail_after(30):
            run = await hooks.run(spec_for(server.url), {}, {})
            await hooks.aclose()
    assert run.over_cap and interpret("PreToolUse", run).decision == "deny"


@pytest.mark.parametrize(("server", "pause", "connections"), [
    ({"close": True}, 0.0, 3),
    ({"idle_timeout": 0.1}, 0.4, 3),
    ({}, 0.4, 1),
], ids=["connection-close", "server-closed-idle", "kept-alive"])
async def test_a_connection_the_server_closed_is_not_reused(server: dict[str, Any], pause: float,
                                                            connections: int) -> None:
    """`Connection: close`, or an idle connection the server closed: the next hook opens a new one
    and is answered; a connection kept alive carries them all."""
    hooks = HttpHooks()
    with HookServer(answering(200, pre_output("allow")), **server) as hook_server:
        with trio.fail_after(30):
            for _ in range(3):
                run = await hooks.run(spec_for(hook_server.url), {}, {})
                assert interpret("PreToolUse", run).decision == "allow", run
                await trio.sleep(pause)
            await hooks.aclose()
        assert hook_server.connections == connections


async def test_an_over_cap_answer_does_not_poison_the_next() -> None:
    """The connection of a body left unread (over the cap) is closed, not reused."""
    big = b" " * (HOOK_OUTPUT_CAP + 10) + ALLOW

    def answer(path: str, payload: Any) -> tuple[int, bytes, float]:
        return 200, big if payload.get("big") else ALLOW, 0.0

    hooks = HttpHooks()
    with HookServer(answer) as server:
        with trio.fail_after(30):
            first = await hooks.run(spec_for(server.url), {"big": True}, {})
            second = await hooks.run(spec_for(server.url), {}, {})
            await hooks.aclose()
    assert first.over_cap and interpret("PreToolUse", second).decision == "allow"
    assert server.connections == 2


@pytest.mark.parametrize(("reply", "error"), [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", "failed (RemoteProtocolError)"),
    (b"garbage\r\n\r\n", "failed (RemoteProtocolError)"),
    (b"", "failed (RemoteProtocolError)"),
], ids=["cut-short", "not-http", "closed-without-answer"])
async def test_a_broken_answer_is_no_answer(reply: bytes, error: str) -> None:
    """A server that answers garbage, cuts the body short or closes without answering: the hook
    did not answer, named by the error's type (never its text, which may quote the URL)."""
    async def handler(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        if reply:
            await stream.send_all(reply)
        await stream.aclose()

    hooks = HttpHooks()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
            port = listeners[0].socket.getsockname()[1]
            run = await hooks.run(spec_for(f"http://127.0.0.1:{port}/pre"), {}, {})
            await hooks.aclose()
            nursery.cancel_scope.cancel()
    assert run.no_answer == f"POST http://127.0.0.1:{port}/pre {error}"


async def test_a_kept_alive_connection_closed_as_the_request_arrives_is_retried_once() -> None:
    """The server closes a kept-alive connection on the next request without answering it (the
    keep-alive race): the request goes once more on a new connection and is answered."""
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    accepted: list[int] = []

    async def handler(stream: trio.SocketStream) -> None:
        accepted.append(1)
        await stream.receive_some(65536)
        await stream.send_all(ok)
        await stream.receive_some(65536)  # the second request on this connection: no answer
        await stream.aclose()

    hooks = HttpHooks()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
            url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/pre"
            runs = [await hooks.run(spec_for(url), {}, {}) for _ in range(2)]
            await hooks.aclose()
            nursery.cancel_scope.cancel()
    assert [interpret("PreToolUse", run).decision for run in runs] == ["none", "none"]
    assert [run.no_answer for run in runs] == [None, None] and len(accepted) == 2


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (and its key), made with the openssl command."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a certificate")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key),
                    "-out", str(cert)], check=True, capture_output=True, timeout=60)
    return cert, key


@pytest.mark.parametrize("trusted", [True, False])
async def test_https_hooks_verify_the_certificate(certificate: tuple[Path, Path], trusted: bool,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """An https hook is answered over TLS when the server's certificate is trusted (here through
    SSL_CERT_FILE) and reused; an untrusted one is never sent the payload."""
    cert, key = certificate
    if trusted:
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    seen: list[bytes] = []

    async def handler(stream: trio.SocketStream) -> None:
        tls = trio.SSLStream(stream, context, server_side=True)
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while True:
                data = await tls.receive_some(65536)
                if not data:
                    break
                seen.append(bytes(data))
                await tls.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(ALLOW)).encode()
                                   + b"\r\n\r\n" + ALLOW)

    hooks = HttpHooks()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
            url = f"https://127.0.0.1:{listeners[0].socket.getsockname()[1]}/pre"
            runs = [await hooks.run(spec_for(url), {"n": 1}, {}) for _ in range(2)]
            await hooks.aclose()
            nursery.cancel_scope.cancel()
    if trusted:
        assert [interpret("PreToolUse", run).decision for run in runs] == ["allow", "allow"]
        assert len(seen) == 2 and seen[0].startswith(b"POST /pre HTTP/1.1")
    else:
        assert [run.no_answer for run in runs] == [f"POST {url} could not connect"] * 2
        assert seen == []


# --- through a real gateway ------------------------------------------------------------------------

async def run_danger(home: Path, tmp_path: Path, args: dict[str, Any] | None = None) -> tuple[Any, bool]:
    danger_log = tmp_path / "danger.log"
    async with sdk_client(home, env={"TOOLFUNNEL_DANGER_LOG": str(danger_log)}) as client:
        result = await client.call_tool("toolfunnel_run_tool", {"name": "danger", "args": args or {}})
    return result, danger_log.exists()


@pytest.mark.parametrize(("body", "reason"), [
    (pre_output("deny", "http says no"), "http says no"),
    ({"decision": "block", "reason": "legacy no"}, "legacy no"),
    (pre_output("ask", "Danger ahead"),
     "Danger ahead (the client cannot be asked; gate.askFallback is deny)"),
], ids=["deny", "legacy-block", "ask-falls-back-to-deny"])
async def test_an_http_deny_means_the_tool_never_ran(home: Path, tmp_path: Path, body: Any,
                                                     reason: str) -> None:
    """A deny from the hook server: the side-effect file never appears and the reason is returned."""
    with HookServer(answering(200, body)) as server:
        set_hooks(home, http_hook(server.url))
        result, ran = await run_danger(home, tmp_path)
    assert result.is_error and text(result) == reason
    assert not ran
    assert server.requests[0][2]["tool_name"] == "danger"


@pytest.mark.parametrize(("answer", "fail_closed", "runs"), [
    (answering(200, b""), False, True),
    (answering(200, pre_output("allow")), True, True),
    (answering(500, b"oops"), False, True),
    (answering(500, b"oops"), True, False),
    (answering(307, b""), True, False),
    (answering(200, b"just text"), False, True),
    (answering(200, b"just text"), True, False),
    (answering(200, b"x" * (HOOK_OUTPUT_CAP + 1)), False, False),
    (answering(200, b"", delay=5.0), False, True),
    (answering(200, b"", delay=5.0), True, False),
], ids=["empty", "allow-failclosed", "500", "500-failclosed", "redirect-failclosed", "not-json",
        "not-json-failclosed", "over-cap", "timeout", "timeout-failclosed"])
async def test_no_answer_lets_the_call_run_unless_fail_closed(
    home: Path, tmp_path: Path, answer: Any, fail_closed: bool, runs: bool
) -> None:
    """An http hook that did not answer is a non-blocking error unless failClosed (over the cap denies)."""
    with HookServer(answer) as server:
        set_hooks(home, http_hook(server.url, timeout=0.5, failClosed=fail_closed))
        result, ran = await run_danger(home, tmp_path)
    assert result.is_error is (not runs) and ran is runs


@pytest.mark.parametrize("fail_closed", [False, True])
async def test_a_refused_connection_through_the_gateway(home: Path, tmp_path: Path,
                                                        fail_closed: bool) -> None:
    """No hook server listening: the call runs, unless the hook fails closed."""
    set_hooks(home, http_hook(f"http://127.0.0.1:{closed_port()}/pre", failClosed=fail_closed))
    result, ran = await run_danger(home, tmp_path)
    assert result.is_error is fail_closed and ran is not fail_closed


async def test_updated_input_and_post_tool_use(home: Path) -> None:
    """updatedInput rewrites the arguments; PostToolUse gets the payload a command hook gets (the
    arguments that ran, the tool's response); several calls share one connection to the hook server."""
    def answer(path: str, payload: Any) -> tuple[int, bytes, float]:
        if payload["hook_event_name"] == "PreToolUse":
            return 200, json.dumps(pre_output("allow", updatedInput={"rewritten": True})).encode(), 0.0
        return 200, b"", 0.0

    with HookServer(answer) as server:
        set_hooks(home, http_hook(server.url), http_hook(server.url, event="PostToolUse"))
        async with sdk_client(home) as client:
            for _ in range(3):
                result = await client.call_tool("toolfunnel_run_tool",
                                                {"name": "echo", "args": {"original": 1}})
                assert result.structured_content == {"ok": True, "args": {"rewritten": True}, "argv": []}
    events = [payload["hook_event_name"] for _, _, payload in server.requests]
    assert events == ["PreToolUse", "PostToolUse"] * 3
    post = server.requests[1][2]
    assert post["tool_name"] == "echo" and post["tool_input"] == {"rewritten": True}  # what ran
    assert post["tool_response"]["structuredContent"]["args"] == {"rewritten": True}
    assert post["tool_use_id"] == server.requests[0][2]["tool_use_id"]
    assert server.connections == 1


async def test_session_start_context_from_an_http_hook(home: Path) -> None:
    """SessionStart's additionalContext from the hook server lands in the instructions."""
    context = {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "Be kind."}}
    with HookServer(answering(200, context)) as server:
        set_hooks(home, http_hook(server.url, event="SessionStart"))
        async with sdk_client(home) as client:
            assert client.instructions is not None and client.instructions.endswith("\n\nBe kind.")


# --- management ------------------------------------------------------------------------------------

def test_hook_add_writes_an_http_hook(home: Path) -> None:
    """`tfunnel hook add --url` writes an http row (header values in the file, never in what it
    prints or audits); `tfunnel check` accepts it; a bad URL or a mix with a command is refused."""
    (home / "logs").mkdir(exist_ok=True)
    (home / "logs" / "log.config.json").write_text(json.dumps({"enabled": True}))
    added = tfunnel(home, "hook", "add", "remote", "--event", "PreToolUse",
                    "--url", "https://hooks.example/pre?k=QUERYSECRET",
                    "--header", "Authorization=Bearer ${T}",
                    "--header", "X-Lit=LITERALSECRET",
                    "--allow-env", "T", "--fail-closed", "--timeout", "5", "--json")
    assert added.returncode == 0, added.stderr
    shown = json.loads(added.stdout)
    assert shown["hook"] == {"id": "remote", "type": "http", "enabled": True, "event": "PreToolUse",
                             "url": "https://hooks.example/pre", "headers": ["Authorization", "X-Lit"],
                             "allowedEnvVars": ["T"], "failClosed": True, "timeout": 5.0}
    row = json.loads((home / "hooks" / "hooks.manifest.json").read_text())["hooks"][-1]
    assert row["headers"] == {"Authorization": "Bearer ${T}", "X-Lit": "LITERALSECRET"}
    assert row["url"] == "https://hooks.example/pre?k=QUERYSECRET" and "command" not in row
    audit = (home / "logs" / "toolfunnel.log.jsonl").read_text()
    assert "remote" in audit and "LITERALSECRET" not in audit and "QUERYSECRET" not in audit
    assert tfunnel(home, "check").returncode == 0
    listed = tfunnel(home, "hook", "list", "--json")
    row_listed = next(r for r in json.loads(listed.stdout)["hooks"] if r["id"] == "remote")
    assert row_listed == {"id": "remote", "event": "PreToolUse", "type": "http", "enabled": True,
                          "url": "https://hooks.example/pre"}
    plain = tfunnel(home, "hook", "list")
    assert "LITERALSECRET" not in plain.stdout and "QUERYSECRET" not in plain.stdout
    spec = load_manifest(home).hooks[-1]
    assert (spec.kind, spec.allowed_env_vars, spec.fail_closed) == ("http", ("T",), True)
    for extra, message in ((["--url", "http://hooks.example/pre"], "must use https"),
                           (["--url", "https://h.example", "--header", "novalue"], "NAME=VALUE"),
                           (["--command", "true", "--header", "A=b"], "give --url too")):
        done = tfunnel(home, "hook", "add", "other", "--event", "PreToolUse", *extra)
        assert done.returncode == 1 and message in done.stderr, done.stderr
    both = tfunnel(home, "hook", "add", "other", "--event", "PreToolUse", "--url", "https://h.example",
                   "--command", "true")
    assert both.returncode == 2  # argparse: one of --command, --script-file, --url
