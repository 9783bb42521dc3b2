"""Trust on first use, and what a change does (pure; table-tested in tests/test_approvals.py).

`review` takes what an upstream lists now and its record, and returns the new record and what
happened. The rules, in order, for each item:

- its digest is the approved one → shown as listed;
- new (never approved): quarantined when the first-sight check flags it (`quarantine` not
  `off`); held as new when `quarantine` is `all-new`, or when the upstream is `strictApproval`
  and already known (a strict upstream's first sight is still trust on first use); else approved;
- changed, at a server identity (name and version) this upstream never showed before, not
  `strictApproval`, and not held already: approved as an update (that is what an update looks
  like), unless the first-sight check flags the new descriptor, which quarantines it;
- changed otherwise (the same version, a version seen before — a downgrade, or two processes of
  different versions on one home —, an item already held, or `strictApproval`): held, naming
  what changed (in names that are ours: `pins.changed_fields`).

A held item whose descriptor is the one already held keeps its first `since`. Items no longer
listed keep their approval (a tool that comes back changed is still a change) and lose any hold.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from tfunnel.approvals.book import Held, Pin, Record, Why
from tfunnel.approvals.pins import Item, changed_fields
from tfunnel.config.model import Quarantine

# The first-sight check: a short, model-safe reason (rule ids and fields) when it flags an item.
Inspect = Callable[[Item], str | None]
_MAX_PATHS = 6
MAX_SEEN = 32  # server identities remembered per upstream


@dataclass(frozen=True)
class Event:
    """What a review did, for the audit log: `event` is `pinned` (first sight approved),
    `updated` (approved with a new server version), `held` (newly held) or `released` (a hold
    that ended because the item is back to its approved form or gone)."""

    event: Literal["pinned", "updated", "held", "released"]
    keys: tuple[str, ...]
    detail: str = ""


@dataclass(frozen=True)
class Review:
    record: Record
    events: tuple[Event, ...]


def review(record: Record | None, server_name: str, server_version: str, items: Mapping[str, Item], *,
           strict: bool, quarantine: Quarantine, inspect: Inspect, now: str) -> Review:
    first = record is None
    old = record or Record()
    identity = f"{server_name} {server_version}"
    seen = old.seen or ((f"{old.server_name} {old.server_version}",) if not first else ())
    new_identity = not first and identity not in seen
    approved = dict(old.approved)
    held: dict[str, Held] = {}
    pinned: list[str] = []
    updated: list[str] = []

    def hold(item: Item, why: Why, reason: str) -> None:
        before = old.held.get(item.key)
        if before is not None and before.digest == item.digest:
            held[item.key] = before  # the same descriptor, held since it was first held
        else:
            held[item.key] = Held(item.digest, item.fields, why, reason, now)

    def flagged(item: Item) -> str | None:
        return inspect(item) if quarantine != "off" else None

    for key, item in items.items():
        pin = approved.get(key)
        if pin is not None and pin.digest == item.digest:
            continue
        if pin is None:
            finding = flagged(item)
            if finding is not None:
                hold(item, "quarantined", f"flagged on first sight: {finding}")
            elif quarantine == "all-new":
                hold(item, "new", "new, and every new item waits for approval (approvals.quarantine all-new)")
            elif strict and not first:
                hold(item, "new", "new since the upstream was approved (strictApproval)")
            else:
                approved[key] = Pin(item.digest, item.fields, now, "first-sight")
                pinned.append(key)
            continue
        what = _what_changed(pin, item)
        if new_identity and not strict and key not in old.held:
            finding = flagged(item)
            if finding is not None:
                hold(item, "quarantined", f"{what} changed with a new server version and it is "
                                          f"flagged: {finding}")
            else:
                approved[key] = Pin(item.digest, item.fields, now, "version")
                updated.append(key)
        elif strict:
            hold(item, "changed", f"{what} changed (strictApproval holds every change)")
        elif new_identity:  # held before the version changed: an update does not launder it
            hold(item, "changed", f"{what} changed, and was held before the server version changed")
        elif identity != f"{old.server_name} {old.server_version}":
            hold(item, "changed", f"{what} changed, with server version {server_version or '(none)'} "
                                  "seen before (not an update)")
        else:
            hold(item, "changed", f"{what} changed at the same server version "
                                  f"{server_version or '(none given)'}")
    seen = seen if identity in seen else (*seen, identity)[-MAX_SEEN:]
    new = replace(old, server_name=server_name, server_version=server_version, approved=approved, held=held,
                  seen=seen)
    events: list[Event] = []
    if pinned:
        events.append(Event("pinned", tuple(pinned)))
    if updated:
        was, now_is = f"{old.server_name} {old.server_version}", f"{server_name} {server_version}"
        events.append(Event("updated", tuple(updated), f"server {was} -> {now_is}"))
    fresh = tuple(k for k, h in held.items() if old.held.get(k) != h)
    if fresh:
        events.append(Event("held", fresh, "; ".join(f"{k}: {held[k].reason}" for k in fresh)))
    released = tuple(k for k in old.held if k not in held)
    if released:
        events.append(Event("released", released))
    return Review(new, tuple(events))


def _what_changed(pin: Pin, item: Item) -> str:
    paths = changed_fields(pin.fields, item.fields)
    shown = ", ".join(paths[:_MAX_PATHS]) + (f" and {len(paths) - _MAX_PATHS} more" if len(paths) > _MAX_PATHS
                                              else "")
    return shown or "its descriptor"


def accept(record: Record, keys: frozenset[str] | None, now: str) -> tuple[Record, tuple[str, ...]]:
    """`record` with the held items `keys` (every held item when None) approved as they were
    held; and the keys that were accepted."""
    chosen = tuple(sorted(k for k in record.held if keys is None or k in keys))
    approved = {**record.approved, **{k: Pin(record.held[k].digest, record.held[k].fields, now, "accepted")
                                      for k in chosen}}
    held = {k: h for k, h in record.held.items() if k not in chosen}
    return replace(record, approved=approved, held=held), chosen
