"""The admin UI's ASGI app: the page and its assets, the views, the operations, the live socket.

Every request passes `guard.check` first (Host, and for a change its origin, type and CSRF
token); every response carries `SECURITY_HEADERS`. The assets are the package's own files,
read once at start and served by name from that fixed list (no path from a request reaches the
file system). Reference: docs/ui.md.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import structlog
import trio

from tfunnel.errors import ToolFailure
from tfunnel.protocol import jsonrpc
from tfunnel.serve.asgi import Disconnected, Receive, Scope, Send, lifespan, read_body
from tfunnel.ui import guard, views
from tfunnel.ui.live import Hub

log = structlog.get_logger("tfunnel.ui")

STATIC = Path(__file__).parent / "static"
CSRF_PLACEHOLDER = b"__CSRF__"
CSP = (b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       b"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = [(b"cache-control", b"no-store"), (b"content-security-policy", CSP),
                    (b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
                    (b"referrer-policy", b"no-referrer"), (b"cross-origin-resource-policy", b"same-origin")]
_TYPES = {".html": b"text/html; charset=utf-8", ".js": b"text/javascript; charset=utf-8",
          ".css": b"text/css; charset=utf-8", ".svg": b"image/svg+xml", ".png": b"image/png",
          ".ico": b"image/x-icon"}
# The operations the UI may run: the management tools that change the home, and discovery.
OPERATIONS = ("tf_tool_add", "tf_tool_set", "tf_tool_update", "tf_mcp_add", "tf_mcp_set",
              "tf_mcp_discover", "tf_expose", "tf_hook_add", "tf_hook_set", "tf_log", "tf_settings",
              "tf_accept_change", "tf_wrap")

View = Callable[[views.Source, Mapping[str, str]], dict[str, Any] | None]


def _activity(source: views.Source, query: Mapping[str, str]) -> dict[str, Any]:
    try:
        limit = int(query.get("limit", "200"))
    except ValueError:
        raise ToolFailure("limit must be a whole number") from None
    return views.activity(source, query.get("type", "all"), limit)


# Each view, and whether it runs in a worker thread (it reads the audit log or counts tokens);
# the others touch the supervisor's state, which only the Trio thread may read.
VIEWS: Mapping[str, tuple[View, bool]] = {
    "/api/status": (lambda s, q: views.status(s), False),
    "/api/surface": (lambda s, q: views.surface(s), True),
    "/api/tools": (lambda s, q: views.tools(s), False),
    "/api/tools/detail": (lambda s, q: views.tool_detail(s, q.get("id", "")), True),  # files only
    "/api/upstreams": (lambda s, q: views.upstreams(s), False),
    "/api/hooks": (lambda s, q: views.hooks(s), True),
    "/api/activity": (_activity, True),
    "/api/approvals": (lambda s, q: views.approvals(s), True),
    "/api/settings": (lambda s, q: views.settings(s), True),  # files only
}


def load_assets(folder: Path = STATIC) -> dict[str, tuple[bytes, bytes]]:
    """Every file under `folder` by its URL path (`/app.js`, `/views/tools.js`), with its type."""
    assets: dict[str, tuple[bytes, bytes]] = {}
    for path in sorted(folder.rglob("*")):
        kind = _TYPES.get(path.suffix)
        if path.is_file() and kind is not None and not path.name.startswith("."):
            assets["/" + path.relative_to(folder).as_posix()] = (path.read_bytes(), kind)
    return assets


class UiApp:
    def __init__(self, source: views.Source, hub: Hub, token: str | None = None,
                 assets: Mapping[str, tuple[bytes, bytes]] | None = None) -> None:
        self.source = source
        self.hub = hub
        self.token = token or secrets.token_urlsafe(32)
        self._assets = dict(load_assets() if assets is None else assets)
        page = self._assets.get("/index.html")
        if page is not None:
            self._assets["/"] = self._assets["/index.html"] = (
                page[0].replace(CSRF_PLACEHOLDER, self.token.encode()), page[1])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
        elif scope["type"] == "websocket":
            await self._live(scope, receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        method, path = scope["method"], scope["path"]
        refusal = guard.check(method, _headers(scope), self.token)
        if refusal is not None:
            await _json(send, refusal.status, {"ok": False, "error": refusal.error})
            return
        if method == "POST":
            await self._operate(path, receive, send)
            return
        view = VIEWS.get(path)
        if view is not None:
            await self._view(view, _query(scope), send)
            return
        asset = self._assets.get(path)
        if asset is None:
            await _json(send, 404, {"ok": False, "error": f"no page {path[:100]!r}"})
            return
        body, kind = asset
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", kind), *SECURITY_HEADERS]})
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})

    async def _view(self, view: tuple[View, bool], query: Mapping[str, str], send: Send) -> None:
        build, threaded = view
        try:
            if threaded:
                value = await trio.to_thread.run_sync(build, self.source, query)
            else:
                value = build(self.source, query)
        except ToolFailure as exc:
            await _json(send, 400, {"ok": False, "error": str(exc)})
            return
        if value is None:
            await _json(send, 404, {"ok": False, "error": f"no register tool {query.get('id', '')[:100]!r}"})
            return
        await _json(send, 200, value)

    async def _operate(self, path: str, receive: Receive, send: Send) -> None:
        name = path.removeprefix("/api/op/")
        if not path.startswith("/api/op/") or name not in OPERATIONS:
            await _json(send, 404, {"ok": False, "error": f"no operation {name[:100]!r}"})
            return
        try:
            body = await read_body(receive, guard.MAX_BODY_BYTES)
        except Disconnected:  # a part of a body never runs an operation
            log.info("admin ui request abandoned before its body was whole", operation=name)
            return
        if body is None:
            await _json(send, 413, {"ok": False, "error": "request body too large"})
            return
        try:
            args = json.loads(body, parse_constant=_no_constant) if body.strip() else {}
        except (ValueError, RecursionError):
            await _json(send, 400, {"ok": False, "error": "the body is not valid JSON (NaN and Infinity "
                                    "are not numbers here; nesting is bounded)"})
            return
        if not isinstance(args, dict):
            await _json(send, 400, {"ok": False, "error": "the body must be a JSON object"})
            return
        try:
            result = await self.source.management.operate(name, args, via="ui")
        except ToolFailure as exc:
            await _json(send, 400, {"ok": False, "error": str(exc)})
            return
        except Exception:
            log.exception("admin ui: operation failed", operation=name)
            await _json(send, 500, {"ok": False, "error": f"{name} failed inside the gateway; see its log"})
            return
        await _json(send, 200, result)

    async def _live(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        refusal = guard.check("GET", _headers(scope), self.token, websocket=True,
                              given_token=_query(scope).get("csrf"))
        if scope["path"] != "/api/live" or refusal is not None:
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "websocket.accept"})
        with self.hub.subscribe() as messages:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_until_closed, receive, nursery.cancel_scope)
                await _ws_send(send, {"type": "hello"})
                async for message in messages:
                    await _ws_send(send, message)


def _no_constant(name: str) -> Any:
    """NaN, Infinity and -Infinity: not JSON, and nothing the home's files may hold."""
    raise ValueError(f"{name} is not a JSON number")


async def _until_closed(receive: Receive, scope: trio.CancelScope) -> None:
    while (await receive())["type"] != "websocket.disconnect":
        pass  # the page sends nothing that matters
    scope.cancel()


async def _ws_send(send: Send, message: dict[str, Any]) -> None:
    await send({"type": "websocket.send", "text": jsonrpc.to_bytes(message).decode("utf-8")})


def _headers(scope: Scope) -> dict[str, str]:
    """Request headers by lower-case name; a repeated header counts as refused (its values joined)."""
    out: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        out[key] = f"{out[key]},{text}" if key in out else text
    return out


def _query(scope: Scope) -> dict[str, str]:
    raw = scope.get("query_string", b"").decode("latin-1")
    try:
        return {k: v[0] for k, v in parse_qs(raw, max_num_fields=20).items()}
    except ValueError:  # more fields than any view takes: none of them is read
        return {}


async def _json(send: Send, status: int, value: Any) -> None:
    body = jsonrpc.to_bytes(value)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), *SECURITY_HEADERS]})
    await send({"type": "http.response.body", "body": body})

