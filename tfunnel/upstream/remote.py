"""What every remote upstream transport (Streamable HTTP, WebSocket) shares, pure.

Headers come from `mcp/expose.json` with `${NAME}` references to the gateway's environment, so
a secret (a bearer token, an API key) lives in the environment, never in the file:
`"headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}`. A reference to a variable that is not
set refuses the connection, naming the header and the variable, never a value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from tfunnel.upstream.transport import SpawnFailed

_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_headers(upstream_id: str, headers: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """`headers` with every `${NAME}` replaced by `env[NAME]`. Raises `SpawnFailed` (permanent:
    the environment may be fixed by a restart of the gateway, not by retrying soon) when a
    referenced variable is missing, or when a value would put a line break into a header."""
    expanded: dict[str, str] = {}
    for name, value in headers.items():
        missing = [ref for ref in _REFERENCE.findall(value) if ref not in env]
        if missing:
            raise SpawnFailed(f"upstream {upstream_id!r}: header {name!r} refers to ${{{missing[0]}}}, "
                              "which is not set in the gateway's environment", permanent=True)
        result = _REFERENCE.sub(lambda m: env[m.group(1)], value)
        if "\r" in result or "\n" in result:
            raise SpawnFailed(f"upstream {upstream_id!r}: header {name!r} would contain a line break "
                              "(from the environment)", permanent=True)
        expanded[name] = result
    return expanded


def display_url(url: str) -> str:
    """`url` as logs, errors and listings show it: without userinfo, query or fragment (where
    credentials hide); an unreadable URL shows as `<invalid URL>`."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "<invalid URL>"
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return urlunsplit((parts.scheme, host + port, parts.path, "", ""))
