"""Poll config files for changes, debounced.

Polling (not inotify) because it also sees files that appear later, files replaced by rename
(our atomic writes, editors' save-as) and homes on network filesystems, at the cost of a stat
per file per interval.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import trio

POLL_INTERVAL_S = 0.25
# An edit often arrives as several writes; wait until the file has been quiet this long.
DEBOUNCE_S = 0.15

Signature = tuple[int, int, int] | None


def signature(path: Path) -> Signature:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


async def watch_files(
    callbacks: Mapping[Path, Callable[[], object]],
    *,
    interval: float = POLL_INTERVAL_S,
    debounce: float = DEBOUNCE_S,
    seen: dict[Path, Signature] | None = None,
) -> None:
    """Call `callbacks[path]()` after `path` changes (created, edited, replaced or removed).

    `seen` holds the signatures taken just before the files were first read: a change between
    that read and the start of the watch is then noticed too (instead of becoming the baseline).
    It is the watch's own record from then on, kept current: whoever applies a file itself (the
    management tools) records the new signature there, and the watch does not apply it again."""
    known = seen if seen is not None else {}
    for path in callbacks:
        known.setdefault(path, signature(path))
    while True:
        await trio.sleep(interval)
        changed = [path for path in callbacks if signature(path) != known[path]]
        if not changed:
            continue
        while True:  # let a burst of writes settle
            marks = {path: signature(path) for path in changed}
            await trio.sleep(debounce)
            if all(signature(path) == marks[path] for path in changed):
                break
        for path in changed:
            known[path] = signature(path)
            callbacks[path]()
