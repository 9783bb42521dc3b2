"""Is this request's bearer token good? Pure decisions, table-tested: the `Authorization` header
(`bearer_token`), then the token itself against the keys, the config and a time (`verify`).

The JOSE header is checked here before the JWT library sees the token: `alg` must be one the config
allows (so `none` and every HMAC are refused even if some key would "verify" them), `crit` is refused
(no extension is understood), and the key is chosen by `kid` among keys of the algorithm's family
(an RSA algorithm never runs with an EC key, a key's own `alg` must match). The library then checks
the signature, `iss` and `aud` (RFC 8707: this gateway's resource URI) and that `exp` is present;
`exp` and `nbf` are compared with the given `now` here, with the configured tolerance, so time is an
input and the tests need no clock.

A `Verdict` carries a status (200 good, 401, 400, 403), the RFC 6750 error code, a description that
is safe to send, and the real reason for the server log; none of them ever holds the token.
The JWT library is imported on the first verification only (the gateway's cold start is measured).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfunnel.auth.config import AuthConfig

MAX_TOKEN_CHARS = 8192
# RFC 6750 §2.1 b64token.
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_FAMILY = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}
# RFC 9068 names access tokens `at+jwt`; plenty of servers still say `JWT` or nothing.
_TYPES = ("jwt", "at+jwt", "application/at+jwt")
# Authorization schemes whose name the log may show (IANA's registry, the common ones).
_SCHEMES = {name.lower(): name for name in ("Basic", "Digest", "DPoP", "Negotiate", "NTLM", "Bearer", "HOBA",
                                            "Mutual", "AWS4-HMAC-SHA256")}
# A time claim: a finite number of seconds, not beyond what a double holds exactly.
MAX_TIME = 2**53

INVALID_REQUEST = "invalid_request"
INVALID_TOKEN = "invalid_token"
INSUFFICIENT_SCOPE = "insufficient_scope"
TEMPORARILY_UNAVAILABLE = "temporarily_unavailable"


@dataclass(frozen=True)
class Key:
    """One public signing key of the issuer: `kty` RSA, EC or OKP; `alg` when the JWK names one."""

    kid: str | None
    kty: str
    alg: str | None
    key: Any  # a `cryptography` public key


@dataclass(frozen=True)
class Verdict:
    """The decision on one request. `error` empty with 401 is the bare challenge (no token was
    sent); `unknown_kid` says fresh keys might change the answer."""

    status: int
    error: str = ""
    description: str = ""
    reason: str = ""
    claims: Mapping[str, Any] = field(default_factory=dict)
    scopes: frozenset[str] = frozenset()
    unknown_kid: bool = False

    @property
    def ok(self) -> bool:
        return self.status == 200


def _refuse(description: str, reason: str = "", *, unknown_kid: bool = False) -> Verdict:
    return Verdict(401, INVALID_TOKEN, description, reason or description, unknown_kid=unknown_kid)


def _bad_request(description: str) -> Verdict:
    return Verdict(400, INVALID_REQUEST, description, description)


def bearer_token(values: Sequence[str], query: str = "") -> str | Verdict:
    """The token of a request's `Authorization` header values, or the verdict refusing it: none (or
    another scheme) → 401 bare challenge; repeated, malformed or oversized → 400 `invalid_request`;
    a token in the query string → 400 (RFC 6750 §2.3 is never accepted here)."""
    if any(part.split("=", 1)[0] == "access_token" for part in query.split("&")):
        return _bad_request("a token in the query string is not accepted; send Authorization: Bearer")
    if not values:
        return Verdict(401, description="a bearer token is required", reason="no Authorization header")
    if len(values) > 1:
        return _bad_request("the Authorization header is repeated")
    scheme, _, rest = values[0].strip(" \t").partition(" ")
    if scheme.lower() != "bearer":
        return Verdict(401, description="a bearer token is required",
                       reason=f"Authorization scheme {scheme_name(values[0])} is not Bearer")
    token = rest.strip(" \t")
    if len(token) > MAX_TOKEN_CHARS:
        return _bad_request(f"the bearer token is longer than {MAX_TOKEN_CHARS} characters")
    if not _B64TOKEN.fullmatch(token):
        return _bad_request("the Authorization header must be 'Bearer <token>'")
    return token


def scheme_name(value: str) -> str:
    """What the log may say of an `Authorization` value that is not `Bearer <token>`: its scheme
    when it is a known scheme name followed by a space (or alone), else only its length. Never
    any part of a credential (a bare token, `Bearer\tSECRET`)."""
    head, sep, _ = value.strip(" ").partition(" ")
    if head.lower() in _SCHEMES and (sep or head == value.strip(" ")):
        return repr(_SCHEMES[head.lower()])
    return f"(another scheme, {len(value)} characters)"


def _header(token: str) -> dict[str, Any] | None:
    parts = token.split(".")
    if len(parts) != 3 or not all(parts[:2]):
        return None
    try:
        raw = base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4))
        header = json.loads(raw)
    except (binascii.Error, ValueError, RecursionError):
        return None
    return header if isinstance(header, dict) else None


def _choose(kid: str | None, alg: str, keys: Sequence[Key]) -> Key | Verdict:
    family = _FAMILY.get(alg[:2], "")
    if kid is not None:
        found = [k for k in keys if k.kid == kid]
        if not found:
            return _refuse("token verification failed", f"no key with kid {kid[:64]!r}", unknown_kid=True)
    else:
        found = [k for k in keys if k.kty == family]
        if len(found) > 1:
            return _refuse("token verification failed", "the token names no kid and several keys fit")
        if not found:
            return _refuse("token verification failed", "the token names no kid and no key fits",
                           unknown_kid=True)
    # Several keys under one kid (a rotation that reused it): the one of the token's family.
    key = next((k for k in found if k.kty == family and k.alg in (None, alg)), found[0])
    if key.kty != family or (key.alg is not None and key.alg != alg):
        return _refuse("token verification failed",
                       f"key {kid!r} is {key.kty}/{key.alg or 'any'}, not usable with {alg}")
    return key


def scopes_of(claims: Mapping[str, Any]) -> frozenset[str]:
    """`scope` (space-delimited, RFC 9068) and `scp` (an array, or a string) together."""
    granted: set[str] = set()
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            granted.update(value.split())
        elif isinstance(value, list):
            granted.update(v for v in value if isinstance(v, str))
    return frozenset(granted)


def _number(value: Any) -> float | None:
    """A time claim's value: a finite int or float in 0 <= v < 2**53; None for anything else
    (NaN or infinity would never expire, 10**400 overflows a float)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return float(value) if 0 <= value < MAX_TIME else None
    return value if math.isfinite(value) and 0 <= value < MAX_TIME else None


def verify(token: str, keys: Sequence[Key], config: AuthConfig, now: float) -> Verdict:
    """The verdict on `token` (already through `bearer_token`) at time `now` (seconds since the
    epoch). Never raises for a bad token."""
    header = _header(token)
    if header is None:
        return _refuse("the token is not a signed JWT", "malformed JOSE header")
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in config.algorithms:
        return _refuse("token verification failed", f"algorithm {str(alg)[:20]!r} is not accepted")
    if "crit" in header:
        return _refuse("token verification failed", "the JOSE header has crit extensions")
    typ = header.get("typ")
    if typ is not None and (not isinstance(typ, str) or typ.lower() not in _TYPES):
        return _refuse("the token is not an access token", f"typ {str(typ)[:20]!r}")
    kid = header.get("kid")
    if kid is not None and not isinstance(kid, str):
        return _refuse("the token is not a signed JWT", "kid is not a string")
    chosen = _choose(kid, alg, keys)
    if isinstance(chosen, Verdict):
        return chosen
    import jwt  # here, not at the top: only a gateway with authentication on pays for it

    try:
        claims = jwt.decode(token, chosen.key, algorithms=[alg], audience=list(config.audiences),
                            issuer=config.issuer,
                            options={"require": ["exp", "iss", "aud"], "verify_exp": False,
                                     "verify_nbf": False, "verify_iat": False})
    except jwt.InvalidAudienceError:
        return _refuse("the token was not issued for this resource", "aud does not name this gateway")
    except jwt.InvalidIssuerError:
        return _refuse("the token's issuer is not accepted", "iss is not the configured issuer")
    except jwt.MissingRequiredClaimError as exc:
        return _refuse("token verification failed", f"the {exc.claim} claim is missing")
    except jwt.InvalidSignatureError:
        return _refuse("token verification failed", "the signature does not verify")
    except (jwt.PyJWTError, ValueError, TypeError) as exc:  # the library's, and a key it cannot use
        return _refuse("token verification failed", f"{type(exc).__name__}: {str(exc)[:120]}")
    tolerance = config.clock_tolerance_s
    exp = _number(claims.get("exp"))
    if exp is None:
        return _refuse("the exp claim is not a valid time", "exp is not a finite number in [0, 2**53)")
    if now > exp + tolerance:
        return _refuse("the token is expired", f"expired {now - exp:.0f} s ago")
    if "nbf" in claims:
        nbf = _number(claims["nbf"])
        if nbf is None:
            return _refuse("the nbf claim is not a valid time", "nbf is not a finite number in [0, 2**53)")
        if now + tolerance < nbf:
            return _refuse("the token is not valid yet", "nbf is in the future")
    granted = scopes_of(claims)
    missing = [s for s in config.required_scopes if s not in granted]
    if missing:
        text = "missing scope: " + " ".join(missing)
        return Verdict(403, INSUFFICIENT_SCOPE, text, text, claims, granted)
    return Verdict(200, claims=claims, scopes=granted)
