"""The approvals of a running gateway: one owner for the pins, the holds and the file.

`review` is called with what one ready upstream lists; it returns what clients are shown of it
(`views.Shown`). A review is remembered until the listing, the server or the file changes, so
rebuilding the surface costs nothing and a refused call reads no file: the holds travel with the
surface snapshot. When a review changes the record (a first sight, an update, a new hold) the file
is updated under its lock (`store.update`, which re-reads it first, so an acceptance made by the
command line meanwhile is never written over) and each event is logged and audited.

A file that is broken while running leaves the last good book in force (the error is kept for
`/health`) and is not written over: the operator's file is theirs to fix.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from tfunnel.approvals import decide, store, views
from tfunnel.approvals.book import APPROVALS, Book, Record
from tfunnel.approvals.decide import Inspect
from tfunnel.approvals.pins import Item, items_of
from tfunnel.config.files import LiveFiles
from tfunnel.config.model import Quarantine
from tfunnel.observe.audit import AuditLog

log = structlog.get_logger("tfunnel.approvals")

_UNJUDGED = "upstream items could not be reviewed; none of them is shown"


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(frozen=True)
class Listing:
    """What one ready upstream shows: its identity, instructions and lists by kind."""

    server_name: str
    server_version: str
    instructions: str
    lists: Mapping[str, Sequence[Mapping[str, Any]]]
    strict: bool = False


class Approvals:
    def __init__(self, home: Path, book: Book, files: LiveFiles, audit: AuditLog, *,
                 quarantine: Quarantine = "suspicious",
                 inspect: Callable[[Mapping[str, str]], Inspect] | None = None,
                 clock: Callable[[], str] = now_iso) -> None:
        """`inspect(others)` makes the first-sight check for one review (`others`: the names
        already on the surface and who owns them)."""
        self._home = home
        self._book = book
        self._files = files
        self._audit = audit
        self._quarantine: Quarantine = quarantine
        self._inspect = inspect or (lambda others: lambda item: None)
        self._clock = clock
        self._memo: dict[str, tuple[Listing, views.Shown]] = {}
        self._stale: set[str] = set()
        # Called (under the file's lock) after each write of ours: the watcher is told it was us.
        self.on_write: Callable[[], None] = lambda: None

    @property
    def book(self) -> Book:
        return self._book

    def review(self, upstream: str, listing: Listing, others: Callable[[], Mapping[str, str]]) -> views.Shown:
        """What clients are shown of `upstream` now; `others()` (asked only when something is
        judged) names what a new item must not pass itself off as."""
        return self.review_all({upstream: listing}, lambda _upstream: others())[upstream]

    def review_all(self, listings: Mapping[str, Listing],
                   others: Callable[[str], Mapping[str, str]]) -> dict[str, views.Shown]:
        """What clients are shown of each upstream in `listings` now. Those whose listing is new
        since their last review are judged together, in one update of the file (fifty upstreams
        coming up at once write it once, not fifty times); `others(upstream)` is asked only for
        those. An upstream that cannot be judged shows nothing (fail closed)."""
        out: dict[str, views.Shown] = {}
        todo: dict[str, Listing] = {}
        for upstream, listing in listings.items():
            memo = self._memo.get(upstream)
            if memo is not None and (memo[0] is listing or memo[0] == listing):
                out[upstream] = memo[1]
            else:
                todo[upstream] = listing
        if todo:
            try:
                records = self._review(todo, others)
            except Exception:
                log.exception(_UNJUDGED, upstreams=list(todo))
                records = {}
            for upstream, listing in todo.items():
                result = views.Shown({}, "", {})
                record = records.get(upstream)
                if record is not None:
                    try:
                        result = views.shown(upstream, listing.lists, listing.instructions, record)
                    except Exception:
                        log.exception("upstream items could not be reviewed; none of them is shown",
                                      upstream=upstream)
                self._memo[upstream] = (listing, result)
                out[upstream] = result
        return {upstream: out[upstream] for upstream in listings}

    def take_stale(self) -> bool:
        """Whether a review found approvals changed by someone else (the command line) for
        upstreams already judged: they are to be judged again (their memo is gone)."""
        stale, self._stale = bool(self._stale), set()
        return stale

    def _adopt(self, book: Book, judging: frozenset[str] = frozenset()) -> set[str]:
        """Put `book` in force; forget the reviews of upstreams whose approvals it changes (but
        those being judged against it now)."""
        changed = {u for u in set(book.upstreams) | set(self._book.upstreams)
                   if u not in judging and _approved(book, u) != _approved(self._book, u)}
        self._book = book
        for upstream in changed:
            self._memo.pop(upstream, None)
        return changed

    def _review(self, todo: Mapping[str, Listing], others: Callable[[str], Mapping[str, str]],
                ) -> dict[str, Record]:
        """Judge each upstream of `todo` against the file's current book, in one update of it;
        the record of each one judged (one that could not be is left out, and logged)."""
        now = self._clock()
        ready: dict[str, tuple[Listing, Mapping[str, Item], Inspect]] = {}
        for upstream, listing in todo.items():
            try:
                ready[upstream] = (listing, items_of(listing.lists, listing.instructions),
                                   self._inspect(others(upstream)))
            except Exception:
                log.exception(_UNJUDGED, upstream=upstream)
        outcome: dict[str, decide.Review] = {}
        failed: set[str] = set()

        def change(book: Book) -> Book:
            outcome.clear()
            for upstream, (listing, items, inspect) in ready.items():
                try:
                    review = decide.review(book.upstreams.get(upstream), listing.server_name,
                                           listing.server_version, items, strict=listing.strict,
                                           quarantine=self._quarantine, inspect=inspect, now=now)
                except Exception:
                    failed.add(upstream)
                    continue
                outcome[upstream] = review
                if book.upstreams.get(upstream) != review.record:
                    book = book.with_record(upstream, review.record)
            return book

        try:
            book, reading = store.update(self._home, change, self.on_write,
                                         existed=bool(self._book.upstreams))
        except OSError as exc:  # a read-only home: judge from memory, say so once per review
            log.error("tool approvals cannot be written; judging from the copy in memory",
                      file=APPROVALS.name, error=str(exc))
            book = change(self._book)
        else:
            if reading.value is None:  # broken on disk: the last good book in force judges
                self._files.judge(reading)  # its error, for /health
                book = change(self._book)
            elif book != reading.value:  # we wrote it: the file in force is ours now (as written)
                self._files.judge(store.read(self._home))
            else:
                self._files.judge(reading)  # unchanged: the one read is enough
        for upstream in sorted(failed):
            log.error(_UNJUDGED, upstream=upstream)
        self._stale |= self._adopt(book, judging=frozenset(outcome))
        for upstream, review in outcome.items():
            for event in review.events:
                self._report(upstream, todo[upstream], event)
        return {upstream: review.record for upstream, review in outcome.items()}

    def _report(self, upstream: str, listing: Listing, event: decide.Event) -> None:
        fields: dict[str, Any] = {"upstream": upstream, "items": list(event.keys)}
        if event.event == "pinned":
            log.info("upstream items approved on first sight", upstream=upstream, items=len(event.keys))
        elif event.event == "updated":
            log.warning("upstream items changed with a new server version; approved as an update",
                        upstream=upstream, items=list(event.keys), server=event.detail)
            fields["server"] = event.detail
        elif event.event == "held":
            log.warning("upstream items held for approval", upstream=upstream, items=list(event.keys),
                        reason=event.detail)
            fields["reason"] = event.detail
        else:
            log.info("holds released", upstream=upstream, items=list(event.keys))
        self._audit.record("approval", event=event.event, serverVersion=listing.server_version, **fields)

    def preview(self, upstream: str, lists: Mapping[str, Sequence[Mapping[str, Any]]],
                others: Mapping[str, str]) -> views.Shown:
        """What clients would be shown of `lists` (an upstream connected once, not supervised),
        judged against its record as if its server were unchanged (a change is held, a new item
        checked on first sight); nothing is written or reported."""
        record = self._book.upstreams.get(upstream)
        name, version = (record.server_name, record.server_version) if record is not None else ("", "")
        judged = decide.review(record, name, version, items_of(lists, ""), strict=False,
                               quarantine=self._quarantine, inspect=self._inspect(others), now=self._clock())
        return views.shown(upstream, lists, "", judged.record)

    def reload(self) -> bool:
        """The file changed on disk: adopt a valid version (the last good one stays otherwise);
        True when what is approved changed (those upstreams are judged again). A change to what
        is held only (another gateway's view of its own upstreams) judges nothing again: two
        gateways on one home never make each other rewrite the file."""
        book = self._files.reread(APPROVALS)
        if book is None or book == self._book:
            return False
        return bool(self._adopt(book))

    def forget(self, keep: Sequence[str]) -> None:
        """Drop the remembered reviews of upstreams not in `keep` (no longer ready)."""
        for upstream in [u for u in self._memo if u not in keep]:
            del self._memo[upstream]


def _approved(book: Book, upstream: str) -> dict[str, str]:
    record = book.upstreams.get(upstream)
    return {key: pin.digest for key, pin in record.approved.items()} if record is not None else {}
