"""Live updates for the admin UI: what changed, and each new audit record, pushed to every open
page over its WebSocket.

One mechanism for both ways the UI runs (beside a gateway, or alone on a home that gateways in
other processes serve): `Pulse` looks a few times a second at what the views show — the config
files' signatures, the supervisor's upstream states, the audit log's growth — and tells the
`Hub` what changed (`changed`, named by view) and what was recorded (`audit`). Looking costs a
few `stat` calls; nothing on a gateway's call path waits for the UI.

Every page has a bounded queue. A page that stops reading loses nothing it cannot get back: its
queue is emptied and replaced by one `resync`, after which it reloads every view.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import structlog
import trio

from tfunnel.approvals.book import APPROVALS_FILE
from tfunnel.config.expose import EXPOSE_FILE
from tfunnel.config.load import REGISTER_FILE, SETTINGS_FILE, STATE_FILE
from tfunnel.config.watch import Signature, signature
from tfunnel.gate.manifest import HOOK_STATE_FILE, MANIFEST_FILE
from tfunnel.observe.audit import CONFIG_FILE as LOG_CONFIG_FILE
from tfunnel.ui.views import parse_record
from tfunnel.upstream.states import UpstreamStatistics

log = structlog.get_logger("tfunnel.ui")

QUEUE = 256  # messages a page may be behind before it is told to resync
TICK_S = 0.25
MAX_TAIL_BYTES = 256 * 1024  # the most of the audit log read per tick

# Which views show what each file holds (a file's change reloads them).
SHOWN_IN: Mapping[str, tuple[str, ...]] = {
    REGISTER_FILE: ("tools", "surface"),
    STATE_FILE: ("tools", "surface", "upstreams"),
    MANIFEST_FILE: ("hooks", "tools"),
    HOOK_STATE_FILE: ("hooks", "tools"),
    EXPOSE_FILE: ("upstreams", "tools", "surface"),
    APPROVALS_FILE: ("approvals", "tools", "surface"),
    SETTINGS_FILE: ("settings",),
    LOG_CONFIG_FILE: ("activity",),
}
VIEWS = ("upstreams", "tools", "surface", "hooks", "approvals", "settings", "activity")


def changed_views(files: Sequence[str], upstreams_changed: bool, tools_changed: bool) -> list[str]:
    """The views to reload for a tick's changes, in `VIEWS` order (pure)."""
    wanted = {view for file in files for view in SHOWN_IN.get(file, ())}
    if upstreams_changed:
        wanted.add("upstreams")
    if tools_changed:
        wanted |= {"tools", "surface"}
    return [view for view in VIEWS if view in wanted]


class Hub:
    """The open pages; `publish` never blocks."""

    def __init__(self, queue: int = QUEUE) -> None:
        self._queue = queue
        self._pages: set[_Page] = set()

    @contextmanager
    def subscribe(self) -> Iterator[trio.MemoryReceiveChannel[dict[str, Any]]]:
        page = _Page(self._queue)
        self._pages.add(page)
        try:
            yield page.receive
        finally:
            self._pages.discard(page)
            page.send.close()

    @property
    def pages(self) -> int:
        return len(self._pages)

    def publish(self, message: dict[str, Any]) -> None:
        for page in list(self._pages):
            page.put(message)


class _Page:
    def __init__(self, queue: int) -> None:
        self.send, self.receive = trio.open_memory_channel[dict[str, Any]](queue)

    def put(self, message: dict[str, Any]) -> None:
        try:
            self.send.send_nowait(message)
        except trio.WouldBlock:  # behind: what it missed is replaced by one resync
            while True:
                try:
                    self.receive.receive_nowait()
                except trio.WouldBlock:
                    break
            self.send.send_nowait({"type": "resync"})
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass


class AuditTail:
    """The records appended to the audit log since the last look (a rotated or replaced log is
    read from its start)."""

    def __init__(self, path: Callable[[], Path]) -> None:
        self._path = path
        self._where: tuple[Path, int] | None = None
        self._offset = 0
        self._partial = b""
        self.skip_existing()

    def skip_existing(self) -> None:
        path = self._path()
        st = _stat(path)
        self._where = (path, st[1]) if st is not None else None
        self._offset = st[0] if st is not None else 0
        self._partial = b""

    def read_new(self) -> list[dict[str, Any]]:
        path = self._path()
        st = _stat(path)
        if st is None:
            self._where, self._offset, self._partial = None, 0, b""
            return []
        size, inode = st
        if self._where != (path, inode) or size < self._offset:  # a new file: from its start
            self._where, self._offset, self._partial = (path, inode), 0, b""
        if size == self._offset:
            return []
        try:
            with open(path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read(min(size - self._offset, MAX_TAIL_BYTES))
        except OSError:
            return []
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # what follows the last newline is not a whole record yet
        if len(self._partial) > MAX_TAIL_BYTES:
            self._partial = b""
        return [record for line in lines if (record := parse_record(line)) is not None]


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_ino


class Pulse:
    """Looks at the home, the upstreams and the audit log every `tick_s` and publishes to `hub`."""

    def __init__(self, home: Path, hub: Hub, audit_path: Callable[[], Path],
                 upstreams: Callable[[], Sequence[UpstreamStatistics]], tick_s: float = TICK_S) -> None:
        self._home = home
        self._hub = hub
        self._upstreams = upstreams
        self._tick_s = tick_s
        self._tail = AuditTail(audit_path)
        self._files: dict[str, Signature] = self._signatures()
        self._states = self._upstream_states()

    def _signatures(self) -> dict[str, Signature]:
        return {name: signature(self._home / name) for name in SHOWN_IN}

    def _upstream_states(self) -> dict[str, tuple[Any, ...]]:
        return {s.id: (s.state, s.pid, s.era, s.restarts, s.last_error, s.stopped_reason, s.tools)
                for s in self._upstreams()}

    def tick(self) -> None:
        """One look at everything (the tests' way; `run` reads the audit log in a thread)."""
        self.look()
        self.publish_audit(self._tail.read_new())

    def look(self) -> None:
        """The files' signatures and the upstreams' states: cheap, and the supervisor's state may
        only be read on the Trio thread."""
        files = self._signatures()
        changed_files = [name for name, sig in files.items() if self._files.get(name) != sig]
        self._files = files
        states = self._upstream_states()
        tools_changed = {k: v[-1] for k, v in states.items()} != {k: v[-1] for k, v in self._states.items()}
        upstreams_changed = states != self._states
        self._states = states
        views = changed_views(changed_files, upstreams_changed, tools_changed)
        if views:
            self._hub.publish({"type": "changed", "what": views})

    def publish_audit(self, records: list[dict[str, Any]]) -> None:
        for record in records:
            self._hub.publish({"type": "audit", "record": record})

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await trio.sleep(self._tick_s)
            if not self._hub.pages:
                # Nobody to tell: keep the baseline current, so an opened page hears only what follows.
                self._files, self._states = self._signatures(), self._upstream_states()
                self._tail.skip_existing()
                continue
            try:
                self.look()
                # Reading and parsing what the audit log gained (up to 256 KiB) is the gateway's
                # event loop's time only if it happens on its thread: it does not.
                self.publish_audit(await trio.to_thread.run_sync(self._tail.read_new))
            except Exception:  # a view's source failing must not end live updates for good
                log.exception("admin ui: live update failed")
