"""Headers of remote upstreams (`upstream.remote.expand_headers`): secrets from the environment."""

from __future__ import annotations

import pytest

from tfunnel.upstream.remote import display_url, expand_headers
from tfunnel.upstream.transport import SpawnFailed

ENV = {"TOKEN": "s3cr3t", "USER": "me", "BAD": "x\r\nInjected: yes"}


@pytest.mark.parametrize(("headers", "expected"), [
    ({}, {}),
    ({"Authorization": "Bearer ${TOKEN}"}, {"Authorization": "Bearer s3cr3t"}),
    ({"X-A": "${USER}-${TOKEN}", "X-B": "plain"}, {"X-A": "me-s3cr3t", "X-B": "plain"}),
    ({"X-Literal": "$TOKEN and ${ not a ref }"}, {"X-Literal": "$TOKEN and ${ not a ref }"}),
])
def test_references_are_replaced_from_the_environment(headers: dict[str, str],
                                                     expected: dict[str, str]) -> None:
    """`${NAME}` takes the variable's value; anything else in a header stays as written."""
    assert expand_headers("up", headers, ENV) == expected


@pytest.mark.parametrize(("headers", "fragment"), [
    ({"Authorization": "Bearer ${MISSING}"}, "header 'Authorization' refers to ${MISSING}, which is not set"),
    ({"X-Evil": "${BAD}"}, "header 'X-Evil' would contain a line break"),
])
def test_a_missing_or_unsafe_value_refuses_the_connection(headers: dict[str, str], fragment: str) -> None:
    """The refusal names the header and the variable, never a value from the environment."""
    with pytest.raises(SpawnFailed) as refused:
        expand_headers("up", headers, ENV)
    assert fragment in str(refused.value)
    assert "s3cr3t" not in str(refused.value) and "Injected" not in str(refused.value)
    assert refused.value.permanent


@pytest.mark.parametrize(("url", "shown"), [
    ("https://mcp.example.com/mcp", "https://mcp.example.com/mcp"),
    ("https://user:pw@mcp.example.com:8443/mcp?key=abc#frag", "https://mcp.example.com:8443/mcp"),
    ("ws://[::1]:9000/ws?token=t", "ws://[::1]:9000/ws"),
    ("http://[::1", "<invalid URL>"),
])
def test_a_url_is_shown_without_credentials(url: str, shown: str) -> None:
    """Listings, logs and errors show a URL without userinfo, query or fragment."""
    assert display_url(url) == shown
