"""Reading and writing `mcp/tool-approvals.json` under one lock, for every process.

The running gateway pins what it sees and the command line accepts what is held; both read the
file, change one upstream's record and write it back. `update` does that under an exclusive
`flock` on a sibling lock file, reading the file fresh inside the lock, so neither can write back a
stale copy over the other's change. Writes are atomic (`config.atomic`).

Each process keeps its last reading of the file with the file's signature (inode, size, mtime,
ctime): a read finds the file as this process last read or wrote it, and is answered from memory
(a gateway that pins 50 upstreams one after another would otherwise read, parse and check the
whole, growing book for each: quadratic). Any write by another process (an atomic replace gives a
new inode; an edit in place a new mtime and ctime) changes the signature, and the file is read.
A reading is kept only once the file is older than the clock's granularity (`_SETTLED_NS`: an
edit in place within the same tick, of the same size, would otherwise look unchanged); what this
process writes itself, under the lock every writer takes, is kept at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from tfunnel.approvals.book import APPROVALS, APPROVALS_FILE, Book, to_document
from tfunnel.config.atomic import write_json_atomic
from tfunnel.config.files import Reading, read_config
from tfunnel.errors import ConfigProblem

LOCK_FILE = "mcp/.tool-approvals.lock"


@contextlib.contextmanager
def locked(home: Path) -> Iterator[None]:
    path = home / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


Signature = tuple[int, int, int, int]
_SETTLED_NS = 50_000_000  # file timestamps advance by the kernel's tick (1-10 ms)
_LAST: dict[Path, tuple[Signature, Reading[Book]]] = {}


def _signature(path: Path) -> Signature | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def read(home: Path) -> Reading[Book]:
    path = home / APPROVALS_FILE
    before = _signature(path)  # taken first: a change during the read shows at the next one
    held = _LAST.get(path)
    if before is not None and held is not None and held[0] == before:
        return held[1]
    reading = read_config(home, APPROVALS)
    if before is not None and reading.kind == "valid" and time.time_ns() - before[2] > _SETTLED_NS:
        _LAST[path] = (before, reading)
    else:
        _LAST.pop(path, None)
    return reading


def write(home: Path, book: Book) -> None:
    path = home / APPROVALS_FILE
    document = to_document(book)
    write_json_atomic(path, document, finite=True)  # pins store non-finite numbers as text
    after = _signature(path)
    if after is not None:
        _LAST[path] = (after, Reading(APPROVALS, "valid", book, document=document))


def update(home: Path, change: Callable[[Book], Book], written: Callable[[], None] = lambda: None, *,
           existed: bool = False) -> tuple[Book, Reading[Book]]:
    """Apply `change` to the file's current book and write the result if it differs; return the
    book now in force and the reading it started from. A file that cannot be read is not
    written (the caller decides what that means): `change` then sees no book and the reading
    says why. `written` runs after a write, still under the lock (a gateway records the file's
    new signature there, so its watcher knows the change is its own and no other). With
    `existed`, a missing file counts as broken, not as empty: a file deleted under a running
    gateway must not reset what was approved (an operator who means that writes `{}`)."""
    with locked(home):
        reading = read(home)
        if reading.kind == "missing" and existed:
            problem = ConfigProblem(APPROVALS_FILE, "is missing (deleted while running); to start "
                                                    "approvals afresh, write an empty document such as {}")
            return Book(), replace(reading, value=None, problems=(problem,))
        if reading.value is None:
            return Book(), reading
        book = change(reading.value)
        if book != reading.value:
            write(home, book)
            written()
        return book, reading
