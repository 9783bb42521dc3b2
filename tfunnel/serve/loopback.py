"""Which names count as loopback: the DNS-rebinding guard (`Host`, `Origin`) and the `--host` check.

One rule, decided without any DNS lookup: an IPv4 literal in 127.0.0.0/8 written as a canonical
dotted quad, the IPv6 literal `::1`, or exactly the name `localhost` (ASCII, any case). Nothing
else, because anything else is a DNS name an attacker may control (`127.evil.com`,
`127.0.0.1.nip.io`) or a spelling that some resolver but not `ipaddress` reads as an address.

Refused on purpose:
- trailing dots (`localhost.`, `127.0.0.1.`): a different, fully qualified DNS name, resolved by DNS
  rather than by the hosts file;
- `inet_aton` shorthands (`127.1`, `0x7f.1`, `2130706433`, `017700000001`) and leading zeros: not
  canonical literals, and read differently by different parsers;
- IPv4-mapped IPv6 (`::ffff:127.0.0.1`): it names an IPv4 address through the IPv6 stack; no
  client needs it to reach loopback, and refusing it keeps the rule "127.0.0.0/8 or ::1";
- zone ids (`::1%lo`) and whitespace, percent-encoding or userinfo anywhere.

Pure (no I/O, no trio); each entry point takes one input shape and funnels into `is_loopback_name`.
"""

from __future__ import annotations

import functools
import ipaddress

_MAX_PORT = 65535
_IPV6_LOOPBACK = ipaddress.IPv6Address("::1")
_ORIGIN_SCHEMES = ("http", "https")


def is_loopback_name(name: str) -> bool:
    """The one predicate: `name` is `localhost`, a canonical IPv4 literal in 127.0.0.0/8, or `::1`
    (unbracketed, no zone id)."""
    if name.isascii() and name.lower() == "localhost":
        return True
    if "%" in name:  # a zone id (`::1%lo`): not the plain loopback address
        return False
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv4Address):
        return address.is_loopback
    # Exactly ::1: a mapped (::ffff:127.0.0.1) or compatible form is not, whatever the Python.
    return address == _IPV6_LOOPBACK


@functools.lru_cache(maxsize=256)  # a client sends the same Host with every request
def is_loopback_authority(value: str) -> bool:
    """A `Host` header value, `host[:port]` or `[v6][:port]`: a loopback host and, if given, a port
    of 1-5 digits up to 65535. An IPv6 literal must be bracketed; an empty port is refused."""
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return False
        host, rest = value[1:end], value[end + 1:]
        if ":" not in host:  # brackets hold IPv6 literals only
            return False
    else:
        host, colon, port = value.partition(":")
        rest = colon + port
    if rest and not (rest.startswith(":") and _valid_port(rest[1:])):
        return False
    return is_loopback_name(host)


def is_loopback_origin(origin: str) -> bool:
    """An `Origin` header value (RFC 6454 serialization `scheme://host[:port]`): http or https and a
    loopback authority, nothing after it. `null` (an opaque origin such as a `file:` page or a
    sandboxed frame) is refused."""
    scheme, sep, authority = origin.partition("://")
    if not sep or scheme.lower() not in _ORIGIN_SCHEMES:
        return False
    return is_loopback_authority(authority)


def is_loopback_bind(host: str) -> bool:
    """A `--host` bind address, as given (IPv6 unbracketed, no port)."""
    return is_loopback_name(host)


def bind_refusal(host: str, *, authenticated: bool) -> str | None:
    """Why `serve --http --host <host>` must not listen there, or None. A non-loopback address is
    reachable by others, so it needs authentication on (`auth/auth.config.json`)."""
    if authenticated or is_loopback_bind(host):
        return None
    return (f"refusing to listen on {host!r} without authentication: a non-loopback address "
            "(anything but 127.0.0.0/8, ::1 or localhost) needs auth/auth.config.json with "
            '"enabled": true')


def _valid_port(port: str) -> bool:
    return 0 < len(port) <= 5 and port.isascii() and port.isdigit() and int(port) <= _MAX_PORT
