"""The upstream tools a gateway last listed, kept in the home for the command line.

A running gateway writes `.tfunnel/upstream-tools.json` whenever its upstream tools change (who
wrote it: the pid; when); `tfunnel tools` reads it, so it can show upstream tools without starting
any upstream: live while that gateway runs, else as cached (saying when). A home that cannot be
written only loses the cache (logged once); the file is a dot-entry, so `tfunnel pack` leaves it out.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from tfunnel.config.atomic import write_json_atomic

log = structlog.get_logger("tfunnel.config")

CACHE_FILE = ".tfunnel/upstream-tools.json"


@dataclass(frozen=True)
class Listed:
    """One upstream tool as listed: its upstream, its own name, its surfaced name, its title."""

    upstream: str
    tool: str
    surfaced: str
    title: str = ""


@dataclass(frozen=True)
class Listing:
    tools: tuple[Listed, ...]
    pid: int
    written: str

    @property
    def live(self) -> bool:
        """Whether the gateway that wrote it still runs."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


class ListingCache:
    """The writer side, for one gateway."""

    def __init__(self, home: Path) -> None:
        self._path = home / CACHE_FILE
        self._failed = False

    def write(self, tools: Iterable[Listed]) -> None:
        document = {"pid": os.getpid(), "written": datetime.now(UTC).isoformat(timespec="seconds"),
                    "tools": [{"upstream": t.upstream, "tool": t.tool, "surfaced": t.surfaced,
                               "title": t.title} for t in tools]}
        try:
            write_json_atomic(self._path, document, finite=True)  # names and titles only
        except OSError as exc:
            if not self._failed:
                log.warning("cannot keep the upstream tool listing for the command line",
                            path=str(self._path), error=str(exc))
            self._failed = True


def read_listing(home: Path) -> Listing | None:
    """The last listing a gateway wrote for `home`, or None (none yet, or unreadable)."""
    try:
        raw = json.loads((home / CACHE_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(raw, Mapping) or not isinstance(raw.get("tools"), list) \
            or not isinstance(raw.get("pid"), int):
        return None
    tools = tuple(Listed(str(t.get("upstream", "")), str(t.get("tool", "")), str(t.get("surfaced", "")),
                         str(t.get("title", ""))) for t in raw["tools"] if isinstance(t, Mapping))
    return Listing(tools, raw["pid"], str(raw.get("written", "")))


def rows(listing: Listing) -> list[dict[str, Any]]:
    return [{"name": t.surfaced, "upstream": t.upstream, "tool": t.tool, "title": t.title}
            for t in listing.tools]
