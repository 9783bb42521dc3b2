"""Who may reach the admin UI, and which requests may change anything (pure: no I/O, no trio).

The UI changes the gateway's policy, so it is a prize for any web page the operator's browser
opens. One rule per threat:

- another machine: the UI binds loopback only, with no override (`bind_refusal`);
- DNS rebinding (a hostile name that resolves to 127.0.0.1): every request's `Host` must be a
  loopback authority, by the HTTP service's one rule (`serve.loopback`);
- cross-site requests (CSRF) from a page on another origin, loopback ones included: a state change
  is a POST of `application/json` (which a form cannot send without a preflight we never answer),
  carrying this process's token in `X-Tfunnel-Csrf` (a page of another origin cannot read ours),
  and, when the browser tells, from our own origin (`Origin` equal to `http://` + our `Host`,
  `Sec-Fetch-Site` same-origin or none). The live WebSocket is held to the same origin and token.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from tfunnel.serve.loopback import is_loopback_authority, is_loopback_bind

# The most a POST body may hold (a script's text is the largest thing the UI sends).
MAX_BODY_BYTES = 256 * 1024
CSRF_HEADER = "x-tfunnel-csrf"
_SAFE_SITES = ("same-origin", "none")
_JSON_TYPES = ("application/json",)


@dataclass(frozen=True)
class Refusal:
    status: int
    error: str


HOST_REFUSED = Refusal(403, "forbidden: the Host header must name a loopback address")
CROSS_ORIGIN = Refusal(403, "forbidden: cross-origin request (CSRF guard)")
BAD_TOKEN = Refusal(403, "forbidden: missing or wrong CSRF token; reload the page")
NOT_JSON = Refusal(415, "a change must be sent as application/json")
METHOD = Refusal(405, "method not allowed")


def bind_refusal(host: str) -> str | None:
    """Why the UI must not listen on `host`, or None: anything but loopback is refused."""
    if is_loopback_bind(host):
        return None
    return (f"the admin UI listens on loopback only, not {host!r}; to reach it from another machine "
            "use an SSH tunnel, e.g. ssh -L 9777:127.0.0.1:9777 <this host>")


def check(method: str, headers: Mapping[str, str], token: str, *, websocket: bool = False,
          given_token: str | None = None) -> Refusal | None:
    """The refusal for a request, or None when it may proceed. `headers` are lower-cased names
    (one value each); `given_token` is a WebSocket's `?csrf=` (browsers cannot set its headers)."""
    host = headers.get("host", "")
    if not is_loopback_authority(host):
        return HOST_REFUSED
    if websocket:
        if not _same_origin(headers, host, required=True):
            return CROSS_ORIGIN
        return None if _token_matches(given_token, token) else BAD_TOKEN
    if method in ("GET", "HEAD"):
        return None
    if method != "POST":
        return METHOD
    if not _same_origin(headers, host, required=False):
        return CROSS_ORIGIN
    if headers.get("content-type", "").split(";")[0].strip().lower() not in _JSON_TYPES:
        return NOT_JSON
    return None if _token_matches(headers.get(CSRF_HEADER), token) else BAD_TOKEN


def _same_origin(headers: Mapping[str, str], host: str, *, required: bool) -> bool:
    site = headers.get("sec-fetch-site")
    if site is not None and site.lower() not in _SAFE_SITES:
        return False
    origin = headers.get("origin")
    if origin is None:
        return not required
    return origin.lower() == f"http://{host}".lower()


def _token_matches(given: str | None, token: str) -> bool:
    if not given or not token:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), token.encode("utf-8"))
