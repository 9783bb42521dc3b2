"""Which protocol era a request belongs to, and legacy version negotiation (pure)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

LEGACY_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_LEGACY = LEGACY_VERSIONS[-1]
MODERN_VERSIONS = ("2026-07-28",)
PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"


class Era(enum.Enum):
    LEGACY = "legacy"
    MODERN = "modern"


def classify(method: str, params: Mapping[str, Any]) -> Era:
    """Modern iff `_meta` carries a protocol version and the method is not `initialize`."""
    if method == "initialize":
        return Era.LEGACY
    meta = params.get("_meta")
    if isinstance(meta, Mapping) and PROTOCOL_VERSION_META in meta:
        return Era.MODERN
    return Era.LEGACY


def negotiate_legacy(requested: Any) -> str:
    """Echo a supported legacy version; answer anything else with the latest legacy one."""
    return requested if requested in LEGACY_VERSIONS else LATEST_LEGACY
