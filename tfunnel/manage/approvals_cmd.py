"""`tfunnel approvals list|diff|accept`: review and accept what the tool approvals hold.

These read `mcp/tool-approvals.json`, which the gateway of this home writes as it pins and holds
what its upstreams list (so a held item shows here once a gateway has seen it). `accept` changes
the file under its lock (`approvals.store.update`: never over a change the gateway made
meanwhile); a running gateway picks the acceptance up live.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tfunnel.approvals import store
from tfunnel.approvals.book import APPROVALS_FILE, Book
from tfunnel.approvals.keeper import now_iso
from tfunnel.approvals.poison import printable
from tfunnel.errors import ToolFailure
from tfunnel.manage import ops_approvals
from tfunnel.observe.audit import AuditLog, load_log_config


def approvals_command(home: Path, action: str, target: str | None, *, every: bool, as_json: bool) -> int:
    try:
        if action == "accept":
            return _accept(home, target, every, as_json)
        book = ops_approvals.current_book(home)
        if action == "list":
            return _list(home, book, as_json)
        upstream, name = ops_approvals.split_target(target)
        if upstream is None and not any(r.held for r in book.upstreams.values()):
            print("[]" if as_json else "nothing is held for approval")
            return 0
        rows = ops_approvals.diff(book, ops_approvals.choose(book, upstream, name))
        if as_json:
            print(json.dumps(rows, indent=2, ensure_ascii=True))
        for row in rows if not as_json else ():
            print(_line(f"{row['upstream']}/{row['item']} ({row['digest'][:19]}): {row['why']}: "
                        f"{row['reason']}"))
            if row["approved"] is None:
                print("(new: nothing of it was approved before)")
            for line in row["diff"].splitlines():
                print(_line(line, 4000))
        return 0
    except (ToolFailure, OSError) as exc:
        print(f"tfunnel approvals: {_line(str(exc))}", file=sys.stderr)
        return 1


def _line(text: str, limit: int = 1000) -> str:
    """Upstream text is printed escaped: no terminal escape sequence, bidi control or hidden
    character from a descriptor reaches the operator's terminal as itself."""
    return printable(text, limit)


def _list(home: Path, book: Book, as_json: bool) -> int:
    rows = ops_approvals.listing(book)
    if as_json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    if not rows:
        print(f"no approvals yet in {home / APPROVALS_FILE} (a gateway on this home pins what it sees)")
    for row in rows:
        server = row["server"]
        print(_line(f"{row['upstream']}  {server['name'] or '-'} {server['version'] or '-'}  "
                    f"approved={row['approved']}  held={len(row['held'])}"))
        for held in row["held"]:
            print("  " + _line(f"{held['why']:<11} {held['item']} ({held['digest'][:19]}): {held['reason']}"))
    return 0


def _accept(home: Path, target: str | None, every: bool, as_json: bool) -> int:
    if (target is None) == (not every):
        print("tfunnel approvals accept: name an UPSTREAM or UPSTREAM/ITEM, or give --all (not both)",
              file=sys.stderr)
        return 2
    upstream, name = ops_approvals.split_target(target)
    if upstream is None and not any(r.held for r in ops_approvals.current_book(home).upstreams.values()):
        print(json.dumps({"ok": True, "accepted": {}}) if as_json else "nothing is held for approval")
        return 0  # --all on nothing: done already (scripts may run it unconditionally)
    done: dict[str, list[str]] = {}
    failure: list[str] = []

    def change(book: Book) -> Book:
        try:
            chosen = ops_approvals.choose(book, upstream, name)
            new, accepted = ops_approvals.accepted(book, chosen, now_iso())
        except ToolFailure as exc:
            failure.append(str(exc))
            return book
        done.update(accepted)
        return new

    _, reading = store.update(home, change)
    if reading.value is None:
        problems = "; ".join(str(p) for p in reading.problems)
        raise ToolFailure(f"{APPROVALS_FILE} cannot be read ({problems}); fix the file first, nothing was "
                          "changed")
    if failure:
        raise ToolFailure(failure[0])
    audit = AuditLog(home, load_log_config(home)[0])
    for up, keys in done.items():
        audit.record("approval", event="accepted", upstream=up, items=keys, via="cli")
    if as_json:
        print(json.dumps({"ok": True, "accepted": done}, ensure_ascii=False))
    else:
        print("\n".join(_line(f"accepted {up}/{k}") for up, keys in done.items() for k in keys))
    return 0
