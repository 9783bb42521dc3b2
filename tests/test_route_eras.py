"""Era selection (`route.eras.select_era`): one pure rule for every transport's inputs."""

from __future__ import annotations

from typing import Any

import pytest

from tfunnel.protocol.eras import Era
from tfunnel.protocol.modern import UNSUPPORTED_PROTOCOL_VERSION
from tfunnel.route.eras import Refusal, select_era

MODERN_META = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}
REFUSED = Refusal(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version",
                  {"supported": ["2026-07-28"], "requested": "2025-06-18"})

# (transport, method, params, version header, serveLegacy) -> era or refusal
CASES: list[tuple[str, str, dict[str, Any], str | None, bool, Era | Refusal]] = [
    # stdio: no header, the body decides
    ("stdio", "initialize", {"protocolVersion": "2025-06-18"}, None, True, Era.LEGACY),
    ("stdio", "tools/list", {}, None, True, Era.LEGACY),
    ("stdio", "tools/list", MODERN_META, None, True, Era.MODERN),
    ("stdio", "server/discover", MODERN_META, None, True, Era.MODERN),
    ("stdio", "initialize", {**MODERN_META, "protocolVersion": "2025-06-18"}, None, True, Era.LEGACY),
    ("stdio", "tools/list", {"_meta": {"progressToken": 1}}, None, True, Era.LEGACY),
    ("stdio", "tools/list", {"_meta": "not an object"}, None, True, Era.LEGACY),
    # a modern-only gateway: a legacy initialize learns the versions served, the rest is modern
    ("stdio", "initialize", {"protocolVersion": "2025-06-18"}, None, False, REFUSED),
    ("stdio", "tools/list", {}, None, False, Era.MODERN),
    ("stdio", "ping", {}, None, False, Era.MODERN),
    # Streamable HTTP: a header outside the legacy list is modern, even for initialize
    ("http", "initialize", {"protocolVersion": "2025-06-18"}, None, True, Era.LEGACY),
    ("http", "initialize", {"protocolVersion": "2025-06-18"}, "2026-07-28", True, Era.MODERN),
    ("http", "initialize", {"protocolVersion": "2025-06-18"}, "1999-01-01", True, Era.MODERN),
    ("http", "tools/call", {}, "2025-06-18", True, Era.LEGACY),
    ("http", "tools/call", {}, " 2025-03-26 ", True, Era.LEGACY),
    ("http", "tools/call", MODERN_META, "2025-06-18", True, Era.MODERN),
    ("http", "tools/call", {}, "2026-07-28", True, Era.MODERN),
    ("http", "tools/call", {}, "", True, Era.MODERN),
    ("http", "initialize", {"protocolVersion": "2025-06-18"}, "2025-06-18", False, REFUSED),
    ("http", "tools/call", {}, "2025-06-18", False, Era.MODERN),
    # Streamable HTTP messages without a method (a response, a GET or DELETE): the header alone
    ("http", "", {}, None, True, Era.LEGACY),
    ("http", "", {}, "2025-06-18", True, Era.LEGACY),
    ("http", "", {}, "2026-07-28", True, Era.MODERN),
    ("http", "", {}, None, False, Era.MODERN),
    # the 2024 SSE transport: no header, the body decides
    ("sse", "initialize", {"protocolVersion": "2024-11-05"}, None, True, Era.LEGACY),
    ("sse", "tools/call", MODERN_META, None, True, Era.MODERN),
]


@pytest.mark.parametrize(("transport", "method", "params", "header", "serve_legacy", "expected"), CASES)
def test_select_era(transport: str, method: str, params: dict[str, Any], header: str | None,
                    serve_legacy: bool, expected: Era | Refusal) -> None:
    """Every transport's inputs map to the era (or refusal) the protocol reference gives them."""
    assert select_era(method, params, serve_legacy=serve_legacy, version_header=header) == expected
