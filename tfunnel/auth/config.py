"""`auth/auth.config.json`: the resource server's settings (SPEC §8.3), validated strictly.

A missing file means authentication is off. A file that is present but malformed or invalid is an
error naming the file and the field: `tfunnel check` reports it and `serve --http` refuses to start
(never silently unauthenticated); a stdio gateway is not affected (it has no HTTP face). The file is
read at start only: a change takes a restart, so no edit can switch authentication off under a
running gateway. Known fields::

    {"enabled": false, "issuer": "https://as.example", "audience": "https://gw.example/mcp",
     "jwksUri": "", "algorithms": ["RS256", "ES256"], "requiredScopes": [],
     "clockToleranceSec": 30, "protectOperations": true}

`issuer`, `audience` and `jwksUri` are absolute https URLs (http only on a loopback host, for tests
and same-machine authorization servers) without userinfo or fragment; `issuer` and `audience` have
no query either. Every value that may reach a response header is checked here to be printable ASCII
without quotes or backslashes, so no config value can break a header.

Pure: no I/O beyond the one reading rule (`config.files`), no JWT library (that is imported only
when authentication is on).
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfunnel.config.files import ConfigFile
from tfunnel.config.validate import Fields

AUTH_FILE = "auth/auth.config.json"
KEYS = ("enabled", "issuer", "audience", "jwksUri", "algorithms", "requiredScopes", "clockToleranceSec",
        "protectOperations")
DEFAULT_ALGORITHMS = ("RS256", "ES256")
# Asymmetric signatures only: a verifier that holds only public keys cannot be fooled by a token
# "signed" with one of them as an HMAC secret, and `none` is no signature at all.
ALLOWED_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
                      "EdDSA")
MAX_TOLERANCE_S = 300
DEFAULT_TOLERANCE_S = 30
MAX_URL_CHARS = 2048
PRM_PATH = "/.well-known/oauth-protected-resource"
_DEFAULT_PORTS = {"http": 80, "https": 443}
# RFC 6749 §3.3 scope-token characters: what may stand in a `scope="..."` header parameter.
_SCOPE_CHARS = frozenset(chr(c) for c in range(0x21, 0x7F)) - {'"', "\\"}
# What a URL may hold here: printable ASCII without space, quotes, backslash or angle brackets.
_URL_CHARS = frozenset(chr(c) for c in range(0x21, 0x7F)) - {'"', "\\", "<", ">", "`", "{", "}", "|", "^"}


@dataclass(frozen=True)
class AuthConfig:
    """The resource server's settings; `enabled` False (the default) means no authentication."""

    enabled: bool = False
    issuer: str = ""
    audience: str = ""
    jwks_uri: str = ""
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS
    required_scopes: tuple[str, ...] = ()
    clock_tolerance_s: int = DEFAULT_TOLERANCE_S
    protect_operations: bool = True
    # The audience as the file wrote it, when that differs from its canonical form (`audience`):
    # a token naming either is for this gateway.
    audience_as_written: str = ""

    @property
    def audiences(self) -> tuple[str, ...]:
        """Every `aud` value that names this gateway."""
        return (self.audience, self.audience_as_written) if self.audience_as_written else (self.audience,)

    @property
    def resource_metadata_url(self) -> str:
        """RFC 9728 §3.1: the well-known path inserted between the audience's origin and its path."""
        split = urllib.parse.urlsplit(self.audience)
        path = split.path.rstrip("/")
        return f"{split.scheme}://{split.netloc}{PRM_PATH}{path}"

    @property
    def metadata_paths(self) -> frozenset[str]:
        """Where this gateway serves its metadata: the root form, the path-inserted form for the
        audience's path, and for `/mcp` (the path this gateway serves, whatever a proxy maps)."""
        path = urllib.parse.urlsplit(self.audience).path.rstrip("/")
        return frozenset({PRM_PATH, PRM_PATH + path, PRM_PATH + "/mcp"})

    def metadata(self) -> dict[str, Any]:
        """The Protected Resource Metadata document (RFC 9728 §2)."""
        document: dict[str, Any] = {"resource": self.audience, "authorization_servers": [self.issuer],
                                    "bearer_methods_supported": ["header"]}
        if self.required_scopes:
            document["scopes_supported"] = list(self.required_scopes)
        return document

    def is_public_authority(self, host: str) -> bool:
        """A `Host` header naming the audience's authority: the host in any case, the port as in
        the audience (its scheme's default port may be written or left out)."""
        return _same_authority(host, self.audience)

    def is_public_origin(self, origin: str) -> bool:
        """An `Origin` header that is the audience's origin (scheme, host, port)."""
        scheme, sep, authority = origin.partition("://")
        audience_scheme = urllib.parse.urlsplit(self.audience).scheme
        return bool(sep) and scheme.lower() == audience_scheme and _same_authority(authority, self.audience)


def _same_authority(value: str, url: str) -> bool:
    split = urllib.parse.urlsplit(url)
    # No whitespace (not in _URL_CHARS), userinfo, path, query or fragment, not even empty ones.
    if not value or any(c not in _URL_CHARS or c in "@/?#" for c in value) or value.endswith(":"):
        return False
    try:
        other = urllib.parse.urlsplit(f"{split.scheme}://{value}")
        port, expected = other.port, split.port
    except ValueError:
        return False
    default = _DEFAULT_PORTS[split.scheme]
    return (other.hostname or "") == (split.hostname or "") and (port or default) == (expected or default) \
        and other.path == "" and not other.query and not other.fragment


def _off(home: Path) -> AuthConfig:
    return AuthConfig()


def _is_loopback_host(host: str) -> bool:
    """A loopback host in a config URL (http is allowed there only): `localhost`, 127.0.0.0/8 or
    ::1. Only a validation rule for this file; the request guard is `serve.loopback`'s."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_HOST_CHARS = re.compile(r"[A-Za-z0-9._-]+")


def host_problem(host: str, netloc: str) -> str | None:
    """Why `host` (the hostname of a URL whose authority is `netloc`) is not one a fetch can use:
    an IP literal must be one, a name must encode to IDNA (no empty or over-long label)."""
    if "[" in netloc or "]" in netloc:
        try:
            ok = ipaddress.ip_address(host).version == 6
        except ValueError:
            ok = False
        return None if ok else "has an invalid IPv6 address"
    if not _HOST_CHARS.fullmatch(host):
        return "has an invalid host name"
    try:
        host.encode("idna")
    except UnicodeError:
        return "has an invalid host name (an empty or over-long label)"
    return None


def url_problem(value: str, *, allow_query: bool) -> str | None:
    """Why `value` is not an acceptable absolute URL for this file, or None. Never raises."""
    if len(value) > MAX_URL_CHARS:
        return f"must be at most {MAX_URL_CHARS} characters"
    if any(c not in _URL_CHARS for c in value):
        return "must be printable ASCII without spaces, quotes, backslashes or angle brackets"
    try:
        split = urllib.parse.urlsplit(value)
        hostname = split.hostname
    except ValueError:
        return "is not a valid URL"
    try:
        split.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        return "has an invalid port"
    if split.scheme not in ("https", "http") or not hostname:
        return "must be an absolute https URL"
    if "@" in split.netloc:
        return "must not hold a user name or password"
    host = host_problem(hostname, split.netloc)
    if host is not None:
        return host
    if split.scheme == "http" and not _is_loopback_host(hostname):
        return "must use https (http is allowed only for a loopback host: localhost, 127.0.0.1, ::1)"
    if split.fragment or value.endswith("#"):
        return "must not have a fragment"
    if not allow_query and (split.query or "?" in value):
        return "must not have a query"
    return None


def canonical_url(value: str) -> str:
    """`value` (already through `url_problem`) with its scheme and host in lower case and its
    scheme's default port left out; the path as written."""
    split = urllib.parse.urlsplit(value)
    host = (split.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = split.port
    netloc = host if port is None or port == _DEFAULT_PORTS.get(split.scheme) else f"{host}:{port}"
    return urllib.parse.urlunsplit((split.scheme.lower(), netloc, split.path, split.query, ""))


def _url(f: Fields, raw: dict[str, Any], key: str, *, required: bool, allow_query: bool) -> str:
    value = f.string(raw, key)
    if not value:
        if required:
            f.problem("is required when enabled is true", None, key)
        return ""
    problem = url_problem(value, allow_query=allow_query)
    if problem is not None:
        f.problem(f"{problem}; got {value[:80]!r}", None, key)
        return ""
    return value


def _algorithms(f: Fields, raw: dict[str, Any]) -> tuple[str, ...]:
    if "algorithms" not in raw:
        return DEFAULT_ALGORITHMS
    values = f.array(raw, "algorithms", "algorithm names")
    if "algorithms" in raw and isinstance(raw["algorithms"], list) and not values:
        f.problem("must list at least one algorithm", None, "algorithms")
    chosen: list[str] = []
    for index, value in enumerate(values):
        field = f"algorithms[{index}]"
        if isinstance(value, str) and (value.lower() == "none" or value.upper().startswith("HS")):
            f.problem(f"{value!r} is refused: only asymmetric signatures are accepted ("
                      f"{', '.join(ALLOWED_ALGORITHMS)})", None, field)
        elif value not in ALLOWED_ALGORITHMS:
            f.problem(f"must be one of {', '.join(ALLOWED_ALGORITHMS)}; got {value!r}", None, field)
        elif value not in chosen:
            chosen.append(value)
    return tuple(chosen)


def _scopes(f: Fields, raw: dict[str, Any]) -> tuple[str, ...]:
    scopes: list[str] = []
    for index, value in enumerate(f.array(raw, "requiredScopes", "scope names")):
        if not isinstance(value, str) or not value or any(c not in _SCOPE_CHARS for c in value):
            f.problem("must be a non-empty scope name (printable ASCII, no spaces, quotes or "
                      f"backslashes); got {value!r}", None, f"requiredScopes[{index}]")
        elif value not in scopes:
            scopes.append(value)
    return tuple(scopes)


def _audience(f: Fields, raw: dict[str, Any], enabled: bool) -> tuple[str, str]:
    """The audience in its canonical form, and as written when that differs."""
    written = _url(f, raw, "audience", required=enabled, allow_query=False)
    if not written:
        return "", ""
    if urllib.parse.urlsplit(written).path.endswith("/"):
        f.warning("ends with '/': tokens must name the audience with that '/' (most authorization "
                  "servers issue it without)", None, "audience")
    canonical = canonical_url(written)
    return canonical, "" if canonical == written else written


def _auth_config(home: Path, raw: dict[str, Any], f: Fields) -> AuthConfig:
    # A typo in a security field must not silently remove enforcement: unknown fields are problems.
    f.known(raw, None, KEYS, strict=True)
    enabled = f.boolean(raw, "enabled") or False
    protect = f.boolean(raw, "protectOperations")
    issuer = _url(f, raw, "issuer", required=enabled, allow_query=False)
    audience, as_written = _audience(f, raw, enabled)
    return AuthConfig(
        enabled=enabled,
        issuer=issuer,
        audience=audience,
        audience_as_written=as_written,
        jwks_uri=_url(f, raw, "jwksUri", required=False, allow_query=True),
        algorithms=_algorithms(f, raw),
        required_scopes=_scopes(f, raw),
        clock_tolerance_s=f.integer(raw, "clockToleranceSec", None, 0, MAX_TOLERANCE_S, DEFAULT_TOLERANCE_S),
        protect_operations=True if protect is None else protect,
    )


# A broken file does not refuse every start: only the HTTP service, which `app_http.run_http` refuses
# on this file's problems (a stdio gateway has nothing to authenticate).
AUTH: ConfigFile[AuthConfig] = ConfigFile(
    AUTH_FILE, "auth config", _auth_config, absent=_off,
    start_fallback="serve --http refuses to start until it is fixed; stdio is not affected")
