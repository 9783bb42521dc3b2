"""The loopback rule behind the DNS-rebinding guard and the `--host` check, as tables."""

from __future__ import annotations

import pytest

from tfunnel.serve.loopback import (
    is_loopback_authority,
    is_loopback_bind,
    is_loopback_name,
    is_loopback_origin,
)

# (bare name, loopback?)
NAMES: list[tuple[str, bool]] = [
    ("127.0.0.1", True),
    ("127.0.0.2", True),
    ("127.255.255.254", True),
    ("::1", True),
    ("0:0:0:0:0:0:0:1", True),  # the same IPv6 literal, spelt out: no DNS name can look like it
    ("localhost", True),
    ("LOCALHOST", True),
    ("LocalHost", True),
    ("localhost.", False),  # trailing dot: a fully qualified DNS name, not the hosts-file name
    ("127.0.0.1.", False),
    ("127.0.0.1.nip.io", False),  # public DNS that answers 127.0.0.1: the rebinding name
    ("127.evil.com", False),
    ("127.", False),
    ("localhost.evil.com", False),
    ("evil.localhost", False),
    ("0x7f.1", False),  # inet_aton shorthands and other non-canonical IPv4 spellings
    ("0x7f000001", False),
    ("2130706433", False),
    ("017700000001", False),
    ("127.1", False),
    ("127.0.1", False),
    ("127.0.0.01", False),
    ("0177.0.0.1", False),
    ("::ffff:127.0.0.1", False),  # IPv4-mapped IPv6
    ("::ffff:7f00:1", False),
    ("::127.0.0.1", False),  # IPv4-compatible IPv6 (deprecated)
    ("::1%lo", False),  # zone id
    ("fe80::1%lo", False),
    ("fe80::1", False),
    ("::", False),
    ("0.0.0.0", False),
    ("10.0.0.1", False),
    ("128.0.0.1", False),
    ("[::1]", False),  # brackets belong to the authority shape, not to the name
    ("", False),
    (" ", False),
    (" 127.0.0.1", False),
    ("127.0.0.1 ", False),
    ("localhost\n", False),
    ("127.0.0.1\t", False),
    ("%31%32%37.0.0.1", False),  # percent-encoding
    ("127.0.0.1%2e", False),
    ("local%68ost", False),
    ("user@127.0.0.1", False),
    ("127.0.0.1@evil.com", False),
    ("\u0661\u0662\u0667.0.0.1", False),  # Arabic-Indic digits
    ("\uff11\uff12\uff17.0.0.1", False),  # fullwidth digits
    ("localhos\u0442", False),  # Cyrillic letter
]

# (Host header value, loopback?)
AUTHORITIES: list[tuple[str, bool]] = [
    ("127.0.0.1", True),
    ("127.0.0.1:9998", True),
    ("127.0.0.1:1", True),
    ("127.0.0.1:65535", True),
    ("localhost:9998", True),
    ("LOCALHOST", True),
    ("[::1]", True),
    ("[::1]:9998", True),
    ("127.0.0.1:", False),  # empty port
    ("127.0.0.1:abc", False),
    ("127.0.0.1:99999", False),
    ("127.0.0.1:65536", False),
    ("127.0.0.1:-1", False),
    ("127.0.0.1:+80", False),
    ("127.0.0.1: 80", False),
    ("127.0.0.1:9998:1", False),
    ("127.0.0.1:000009998", False),
    ("127.0.0.1:\u0669\u0669", False),  # non-ASCII digits
    ("127.0.0.1.:9998", False),
    ("localhost.:9998", False),
    ("127.0.0.1.nip.io", False),
    ("127.0.0.1.nip.io:9998", False),
    ("127.evil.com", False),
    ("127.evil.com:9998", False),
    ("127.1:9998", False),
    ("0x7f000001:9998", False),
    ("::1", False),  # an IPv6 literal must be bracketed in an authority
    ("::1:9998", False),
    ("[::1", False),
    ("[::1]9998", False),
    ("[::1]:", False),
    ("[::1]:abc", False),
    ("[127.0.0.1]", False),
    ("[localhost]", False),
    ("[::ffff:127.0.0.1]", False),
    ("[::ffff:127.0.0.1]:9998", False),
    ("[fe80::1%25lo]", False),
    ("[::1%25lo]:9998", False),
    ("[::1%lo]", False),
    ("user@127.0.0.1", False),
    ("user@127.0.0.1:9998", False),
    ("127.0.0.1@evil.com", False),
    ("127.0.0.1:9998@evil.com", False),
    ("evil.com#@127.0.0.1", False),
    ("127.0.0.1/", False),
    ("", False),
    (" ", False),
    (" 127.0.0.1:9998", False),
    ("127.0.0.1:9998 ", False),
    ("127.0.0.1%3a9998", False),
]

# (Origin header value, loopback?)
ORIGINS: list[tuple[str, bool]] = [
    ("http://127.0.0.1:9998", True),
    ("http://127.0.0.1", True),
    ("https://localhost", True),
    ("http://localhost:3000", True),
    ("HTTP://LOCALHOST:3000", True),
    ("http://[::1]", True),
    ("http://[::1]:9998", True),
    ("http://127.evil.com", False),
    ("http://127.0.0.1.nip.io", False),
    ("http://127.0.0.1.nip.io:9998", False),
    ("http://localhost.", False),
    ("http://evil.example", False),
    ("null", False),
    ("file://", False),
    ("file:///etc/passwd", False),
    ("http://user@127.0.0.1", False),
    ("http://user:pass@localhost:9998", False),
    ("http://127.0.0.1@evil.com", False),
    ("ws://127.0.0.1", False),
    ("wss://localhost", False),
    ("chrome-extension://abcdef", False),
    ("http://127.0.0.1:9998/", False),  # an Origin has no path
    ("http://127.0.0.1/path", False),
    ("http://127.0.0.1?q", False),
    ("http://127.0.0.1:", False),
    ("http://127.0.0.1:99999", False),
    ("http://[::ffff:127.0.0.1]", False),
    ("http://[fe80::1%25lo]", False),
    ("http://::1", False),
    ("http://127.1", False),
    ("http://2130706433", False),
    ("http:127.0.0.1", False),
    ("http:/127.0.0.1", False),
    ("//127.0.0.1", False),
    ("127.0.0.1", False),
    ("http://", False),
    ("", False),
    (" http://127.0.0.1", False),
    ("http://127.0.0.1 ", False),
    ("http://%31%32%37.0.0.1", False),
]

# (--host value, loopback?)
BINDS: list[tuple[str, bool]] = [
    ("127.0.0.1", True),
    ("127.0.0.5", True),
    ("::1", True),
    ("localhost", True),
    ("127.evil.com", False),
    ("127.0.0.1.nip.io", False),
    ("localhost.", False),
    ("127.1", False),
    ("0.0.0.0", False),
    ("::", False),
    ("[::1]", False),  # a bind address is given bare
    ("127.0.0.1:9998", False),  # the port is --port
    ("::ffff:127.0.0.1", False),
    ("", False),
]


@pytest.mark.parametrize(("name", "expected"), NAMES)
def test_loopback_name(name: str, expected: bool) -> None:
    """Only canonical 127.0.0.0/8 literals, ::1 and exactly `localhost` are loopback names."""
    assert is_loopback_name(name) is expected


@pytest.mark.parametrize(("value", "expected"), AUTHORITIES)
def test_loopback_host_header(value: str, expected: bool) -> None:
    """A Host value is a loopback name (IPv6 bracketed) with at most a valid numeric port."""
    assert is_loopback_authority(value) is expected


@pytest.mark.parametrize(("origin", "expected"), ORIGINS)
def test_loopback_origin(origin: str, expected: bool) -> None:
    """An Origin is http(s)://loopback-authority and nothing else; `null` and other schemes are not."""
    assert is_loopback_origin(origin) is expected


@pytest.mark.parametrize(("host", "expected"), BINDS)
def test_loopback_bind(host: str, expected: bool) -> None:
    """A --host value is a bare loopback name; any other name is refused without resolving it."""
    assert is_loopback_bind(host) is expected


def test_no_dns_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deciding never resolves a name: every entry point answers with the resolver disabled."""
    import socket

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a DNS lookup was attempted")

    for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr"):
        monkeypatch.setattr(socket, name, refuse)
    assert not is_loopback_bind("127.evil.com")
    assert not is_loopback_authority("localhost.:80")
    assert not is_loopback_origin("http://127.0.0.1.nip.io")
    assert is_loopback_authority("localhost:80")
