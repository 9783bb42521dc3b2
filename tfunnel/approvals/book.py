"""`mcp/tool-approvals.json`: what was approved of each upstream, and what is held (its format).

```
{"version": 1,
 "upstreams": {"<id>": {
     "server": {"name": "...", "version": "...", "seen": ["<name> <version>", ...]},
     "approved": {"tool:<name>": {"digest": "sha256:...", "fields": {...}, "at": "<iso>",
                                  "how": "first-sight" | "accepted" | "version"}},
     "held": {"tool:<name>": {"digest": "...", "fields": {...}, "since": "<iso>",
                              "why": "changed" | "quarantined" | "new", "reason": "..."}}}}}
```

`approved` is the trust: an item is shown as listed only while its digest is the approved one.
`held` is derived (the gateway recomputes it from each listing) and written so that
`tfunnel approvals` can show and accept what the running gateway holds; accepting copies a held
entry's digest into `approved`, so what is accepted is exactly what was reviewed. A file that
cannot be read refuses the start (`tfunnel check` names it): without it nothing is known to be
approved, and starting afresh would approve whatever the upstreams list now.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from tfunnel.config.files import ConfigFile
from tfunnel.config.validate import Fields

APPROVALS_FILE = "mcp/tool-approvals.json"
How = Literal["first-sight", "accepted", "version"]
Why = Literal["changed", "quarantined", "new"]
HOWS: tuple[How, ...] = ("first-sight", "accepted", "version")
WHYS: tuple[Why, ...] = ("changed", "quarantined", "new")
_TOP_KEYS = ("version", "upstreams")
_RECORD_KEYS = ("server", "approved", "held")
_SERVER_KEYS = ("name", "version", "seen")
_PIN_KEYS = ("digest", "fields", "at", "how")
_HELD_KEYS = ("digest", "fields", "since", "why", "reason")


@dataclass(frozen=True)
class Pin:
    digest: str
    fields: Mapping[str, Any]
    at: str = ""
    how: How = "first-sight"


@dataclass(frozen=True)
class Held:
    digest: str
    fields: Mapping[str, Any]
    why: Why
    reason: str
    since: str = ""


@dataclass(frozen=True)
class Record:
    """One upstream: the server identity last approved, its approved items, its held items."""

    server_name: str = ""
    server_version: str = ""
    approved: Mapping[str, Pin] = field(default_factory=dict)
    held: Mapping[str, Held] = field(default_factory=dict)
    # Every server identity ("<name> <version>") this upstream has shown, oldest first (bounded):
    # only one never seen before is an update; going back to an earlier one is not.
    seen: tuple[str, ...] = ()


@dataclass(frozen=True)
class Book:
    upstreams: Mapping[str, Record] = field(default_factory=dict)

    def with_record(self, upstream: str, record: Record) -> Book:
        return replace(self, upstreams={**self.upstreams, upstream: record})


def _parse(home: Path, raw: dict[str, Any], f: Fields) -> Book:
    f.known(raw, None, _TOP_KEYS)
    version = raw.get("version", 1)
    if version != 1:
        f.problem(f"must be 1 (the only format this version reads), got {version!r}", None, "version")
    upstreams = f.mapping(raw, "upstreams")
    records: dict[str, Record] = {}
    for upstream_id, row in upstreams.items():
        label = f"upstreams.{upstream_id}"
        if not isinstance(row, dict):
            f.problem("must be an object", label)
            continue
        f.known(row, label, _RECORD_KEYS)
        server = f.mapping(row, "server", label)
        f.known(server, label, _SERVER_KEYS, prefix="server.")
        records[upstream_id] = Record(
            server_name=f.string(server, "name", label, field="server.name"),
            server_version=f.string(server, "version", label, field="server.version"),
            seen=tuple(v for v in f.array(server, "seen", "strings", label) if isinstance(v, str)),
            approved=_entries(f.mapping(row, "approved", label), f"{label}.approved", f, _pin),
            held=_entries(f.mapping(row, "held", label), f"{label}.held", f, _held))
    return Book(records)


def _entries(rows: Mapping[str, Any], label: str, f: Fields, make: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, row in rows.items():
        entry = f"{label}.{key}"
        if not isinstance(row, dict):
            f.problem("must be an object", entry)
            continue
        value = make(row, entry, f)
        if value is not None:
            out[key] = value
    return out


def _digest_and_fields(row: dict[str, Any], entry: str, f: Fields) -> tuple[str, dict[str, Any]] | None:
    digest = f.string(row, "digest", entry, required=True)
    fields = f.mapping(row, "fields", entry)
    if digest and not digest.startswith("sha256:"):
        f.problem('must start with "sha256:"', entry, "digest")
        return None
    return (digest, fields) if digest else None


def _pin(row: dict[str, Any], entry: str, f: Fields) -> Pin | None:
    f.known(row, entry, _PIN_KEYS)
    found = _digest_and_fields(row, entry, f)
    how = f.choice(row, "how", entry, HOWS, "first-sight")
    if found is None:
        return None
    return Pin(found[0], found[1], f.string(row, "at", entry), _how(how))


def _held(row: dict[str, Any], entry: str, f: Fields) -> Held | None:
    f.known(row, entry, _HELD_KEYS)
    found = _digest_and_fields(row, entry, f)
    why = f.choice(row, "why", entry, WHYS, "changed")
    if found is None:
        return None
    return Held(found[0], found[1], _why(why), f.string(row, "reason", entry), f.string(row, "since", entry))


def _how(value: str) -> How:
    return next(h for h in HOWS if h == value)


def _why(value: str) -> Why:
    return next(w for w in WHYS if w == value)


def to_document(book: Book) -> dict[str, Any]:
    """The file's JSON for `book` (upstreams and keys sorted, so a rewrite of the same book is
    the same bytes)."""
    upstreams: dict[str, Any] = {}
    for upstream_id in sorted(book.upstreams):
        record = book.upstreams[upstream_id]
        upstreams[upstream_id] = {
            "server": {"name": record.server_name, "version": record.server_version,
                       "seen": list(record.seen)},
            "approved": {k: {"digest": p.digest, "fields": dict(p.fields), "at": p.at, "how": p.how}
                         for k, p in sorted(record.approved.items())},
            "held": {k: {"digest": h.digest, "fields": dict(h.fields), "since": h.since, "why": h.why,
                         "reason": h.reason} for k, h in sorted(record.held.items())},
        }
    return {"version": 1, "upstreams": upstreams}


APPROVALS: ConfigFile[Book] = ConfigFile(APPROVALS_FILE, "tool approvals", _parse, absent=lambda home: Book())
