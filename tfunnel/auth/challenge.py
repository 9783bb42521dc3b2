"""The answer to a refused request: the `WWW-Authenticate` value and the JSON body (RFC 6750 §3).

Pure. Every parameter is a quoted-string, and each value is reduced to the characters RFC 6750
allows there (%x20-21 / %x23-5B / %x5D-7E: printable ASCII without `"` or `\\`), so nothing from a
token, a config file or an exception text can end the header, add a parameter or add a header line.

A request without a token gets the bare challenge (`resource_metadata` and `scope`, no `error`:
RFC 6750 §3.1 "SHOULD NOT include an error code" when no authentication was attempted); a request
with a bad token gets `error="invalid_token"`; a malformed one `error="invalid_request"` (400); a
token without a required scope `error="insufficient_scope"` (403).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MAX_DESCRIPTION = 200


def clean(value: str, limit: int = MAX_DESCRIPTION) -> str:
    """`value` with every character RFC 6750 does not allow in a quoted parameter removed."""
    kept = "".join(c for c in value if c in (" ", "!") or "#" <= c <= "[" or "]" <= c <= "~")
    return kept[:limit]


def www_authenticate(resource_metadata: str, *, error: str = "", description: str = "",
                     scopes: Sequence[str] = ()) -> str:
    """The challenge: `Bearer resource_metadata="…"`, then `scope`, `error`, `error_description`
    when given."""
    params = [("resource_metadata", clean(resource_metadata, 2048))]
    scope = clean(" ".join(scopes), 2048)
    if scope:
        params.append(("scope", scope))
    if error:
        params.append(("error", clean(error, 64)))
        if description:
            params.append(("error_description", clean(description)))
    return "Bearer " + ", ".join(f'{name}="{value}"' for name, value in params)


def body(error: str, description: str) -> dict[str, Any]:
    """The JSON body beside the challenge (RFC 6749 §5.2's shape)."""
    document = {"error": clean(error, 64) or "unauthorized"}
    if description:
        document["error_description"] = clean(description)
    return document
