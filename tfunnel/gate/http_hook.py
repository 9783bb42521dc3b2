"""Run one `type: "http"` hook the way Claude Code does: POST the event payload to its URL.

The body is the JSON a command hook reads on stdin (`Content-Type: application/json`); the answer
is read by the same rules as a command hook's stdout (`decision.interpret`), from a `HookRun`:

- a 2xx with an empty body: success, no decision (a command hook's silent exit 0);
- a 2xx whose body is a JSON object: that object is the hook's output;
- a 2xx with any other body is a hook that did not answer, unless it shows an attempt to decide
  (`decision.tries_to_decide`): then it is read as a command hook's output is, where a decision
  that cannot be read denies;
- a non-2xx status (a redirect included: redirects are not followed), a connection that fails,
  the hook's `timeout`: the hook did not answer, a non-blocking error unless it fails closed;
- a body over the command hooks' output cap: unreadable, a deny (as a command hook's output).

All http hooks share one `httpx2.AsyncClient` (`HttpHooks`) on a lean HTTP/1.1 transport
(`http_transport`), so a hook server on loopback is one kept-alive connection, not a handshake per
call. Header values may carry secrets: they are
never logged; errors and logs name the hook id and the URL without its query. Cancelling the call
cancels the request (it runs in the caller's task).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import trio

from tfunnel.gate.decision import HookRun, tries_to_decide
from tfunnel.gate.manifest import ENV_REFERENCE, HookSpec, shown_url
from tfunnel.gate.runner import HOOK_OUTPUT_CAP

if TYPE_CHECKING:
    import httpx2

# Keep-alive connections to hook servers: more than the hooks one call runs at once
# (engine.MAX_CONCURRENT_HOOKS), so concurrent calls still reuse theirs.
KEEPALIVE_CONNECTIONS = 32
# How long an idle connection to a hook server is kept: long enough to span the pauses between
# an agent's tool calls, short enough not to hold a server's sockets for nothing.
KEEPALIVE_S = 30.0
USER_AGENT = "tfunnel-hooks"
# Parsed hook URLs kept; a manifest has a handful.
MAX_URLS = 256


def expand_headers(spec: HookSpec, env: Mapping[str, str]) -> dict[str, str]:
    """The headers to send: each `$VAR`/`${VAR}` replaced by the variable's value when
    `allowedEnvVars` lists it (and it is set), by "" otherwise, as Claude Code does. Raises
    `ValueError` (naming the header, never a value) when a value would hold a line break."""
    allowed = set(spec.allowed_env_vars)

    def value_of(match: Any) -> str:
        name = match.group(1) or match.group(2)
        return env.get(name, "") if name in allowed else ""

    headers: dict[str, str] = {}
    for name, value in spec.headers:
        expanded = ENV_REFERENCE.sub(value_of, value)
        if not expanded.isprintable():
            raise ValueError(f"header {name!r} would hold a line break or a control character "
                             "(from the environment)")
        headers[name] = expanded
    return headers


def answer_run(spec: HookSpec, status: int, body: bytes | None) -> HookRun:
    """What one answered POST says, as a `HookRun` for `interpret`; `body` None: over the cap."""
    if body is None:
        return HookRun(spec.id, 0, "", "", over_cap=True, fail_closed=spec.fail_closed)
    if not 200 <= status < 300:
        phrase = _phrase(status)
        redirect = " (redirects are not followed)" if 300 <= status < 400 else ""
        return _no_answer(spec, f"{_where(spec)} answered HTTP {status}{phrase}{redirect}")
    text = body.decode("utf-8", "replace")
    if not text.strip() or _is_object(text) or tries_to_decide(text):
        return HookRun(spec.id, 0, text, "", fail_closed=spec.fail_closed)
    return _no_answer(spec, f"{_where(spec)} answered HTTP {status} with a body that is not a JSON object")


class HttpHooks:
    """The http hooks' one client, created at the first http hook and closed by `aclose` (the
    gateway's shutdown; a later hook opens a new one). Never raises for a hook that misbehaves."""

    def __init__(self) -> None:
        self._client: httpx2.AsyncClient | None = None
        self._urls: dict[str, httpx2.URL] = {}  # parsed once per hook URL, not per call

    async def run(self, spec: HookSpec, payload: Mapping[str, Any], env: Mapping[str, str]) -> HookRun:
        import httpx2  # here: a gateway without http hooks never loads the HTTP client

        try:
            headers = expand_headers(spec, env) if spec.headers else None
        except ValueError as exc:
            return _no_answer(spec, f"{_where(spec)} not sent: {exc}")
        content = json.dumps(payload, ensure_ascii=True).encode()
        with trio.move_on_after(spec.timeout_s) as scope:
            try:
                client, url = self._session(), self._url(spec.url)
                async with client.stream("POST", url, content=content, headers=headers) as response:
                    body = await _read(response)
                    return answer_run(spec, response.status_code, body)
            except httpx2.ConnectError:
                return _no_answer(spec, f"{_where(spec)} could not connect")
            except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
                # The type only: some messages quote the URL, with its query.
                return _no_answer(spec, f"{_where(spec)} failed ({type(exc).__name__})")
        assert scope.cancelled_caught
        return HookRun(spec.id, None, "", "", timed_out=True, fail_closed=spec.fail_closed)

    async def aclose(self) -> None:
        """Close the client and its connections (idempotent)."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def _url(self, url: str) -> httpx2.URL:
        import httpx2

        parsed = self._urls.get(url)
        if parsed is None:
            if len(self._urls) >= MAX_URLS:  # manifests edited live many times: start over
                self._urls.clear()
            parsed = self._urls[url] = httpx2.URL(url)
        return parsed

    def _session(self) -> httpx2.AsyncClient:
        import httpx2

        from tfunnel.gate.http_transport import HookTransport

        if self._client is None:
            # The hook's own timeout bounds each request (a trio deadline); proxies from the
            # environment are not used (a hook's payload holds every call's arguments); TLS is
            # verified (the transport's own context).
            self._client = httpx2.AsyncClient(
                timeout=None, follow_redirects=False, trust_env=False,
                headers={"User-Agent": USER_AGENT, "Content-Type": "application/json"},
                transport=HookTransport(max_idle=KEEPALIVE_CONNECTIONS, keepalive_s=KEEPALIVE_S))
        return self._client


def _where(spec: HookSpec) -> str:
    return f"POST {shown_url(spec.url)}"


async def _read(response: httpx2.Response) -> bytes | None:
    """The body, or None as soon as it is over the cap (the rest is not read)."""
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > HOOK_OUTPUT_CAP:
            return None
    return bytes(data)


def _no_answer(spec: HookSpec, what: str) -> HookRun:
    return HookRun(spec.id, None, "", "", no_answer=what, fail_closed=spec.fail_closed)


def _is_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


def _phrase(status: int) -> str:
    try:
        return f" {HTTPStatus(status).phrase}"
    except ValueError:
        return ""
