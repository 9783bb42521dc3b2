"""Nothing the gateway starts outlives what started it: the gateway is the subreaper of its children.

A tool, a hook or an upstream that daemonizes a child (a double fork, `setsid`) puts it beyond the
process-group kill that ends every run. With Linux's `PR_SET_CHILD_SUBREAPER` such a child, once
its parent is gone, is reparented to the gateway instead of to init, and this module decides its
fate by one rule: **an orphan lives only as long as the run that started it.** Each run (a tool
or hook process, an upstream incarnation) is tagged in its children's environment; an orphan whose
tag names a run still going is left alone, any other orphan (its run ended, or it has no tag) is
killed and reaped. Sweeps run when a run ends, every `SWEEP_EVERY_S`, and until none is left when
the gateway stops. Under systemd the unit's cgroup (`KillMode=mixed`) is the same guarantee from
outside.

The sweeper reads `/proc` and never calls `waitpid(-1)`: trio waits for our own children by pid,
and only orphans (never registered as ours) are reaped here. Elsewhere than Linux it does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import signal
import sys
from collections.abc import Iterator, Mapping

import structlog
import trio

log = structlog.get_logger("tfunnel.reaper")

TAG_ENV = "TFUNNEL_RUN_TAG"
PR_SET_CHILD_SUBREAPER = 36
# An orphan of an ended run is killed at the latest this long after it appeared.
SWEEP_EVERY_S = 0.5
# At shutdown, how long to keep sweeping for orphans that appear as their parents die.
FINAL_SWEEP_S = 2.0


def become_subreaper() -> bool:
    """Ask the kernel to reparent our orphaned descendants to us; False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def parent_of(stat: str) -> int | None:
    """The parent pid in a `/proc/<pid>/stat` line (the name may hold spaces and parentheses)."""
    try:
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return None


def tag_of(environ: bytes) -> str | None:
    """The run tag in a `/proc/<pid>/environ` block, if any."""
    prefix = TAG_ENV.encode() + b"="
    for item in environ.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode("ascii", "replace")
    return None


class Reaper:
    """The runs going on, the pids we spawned, and the sweep that ends everything else."""

    def __init__(self, proc: str = "/proc") -> None:
        self.active = False
        self._proc = proc
        self._pid = os.getpid()
        self._runs: set[str] = set()
        self._own: set[int] = set()
        self._spawning = 0
        self._counter = itertools.count(1)
        self.killed = 0

    def activate(self) -> bool:
        """Become the subreaper (once, at the start of a gateway process); True when it took.
        Children the process already has (a wrapper's sidecar, inherited across `exec`) are not
        ours to end: they are never swept."""
        self.active = become_subreaper()
        self._pid = os.getpid()
        self.spare_present()
        if not self.active:
            log.info("not a subreaper here; daemonized grandchildren are not tracked")
        return self.active

    def spare_present(self) -> None:
        """Never sweep the children this process has now (none of our runs started them)."""
        self._own.update(self._children())

    @contextlib.contextmanager
    def run(self, env: Mapping[str, str]) -> Iterator[RunScope]:
        """A run's lifetime: its environment carries the tag; at the end its orphans are swept."""
        tag = f"{self._pid}-{next(self._counter)}"
        self._runs.add(tag)
        scope = RunScope(self, {**env, TAG_ENV: tag})
        try:
            yield scope
        finally:
            self._runs.discard(tag)
            for pid in scope.pids:
                self._own.discard(pid)
            self.sweep()

    @contextlib.contextmanager
    def spawning(self) -> Iterator[None]:
        """Around a fork: until the child is registered, a sweep would mistake it for an orphan."""
        self._spawning += 1
        try:
            yield
        finally:
            self._spawning -= 1

    def orphans(self) -> list[tuple[int, str | None]]:
        """Our children that we did not spawn ourselves (reparented to us), with their tags."""
        found: list[tuple[int, str | None]] = []
        for pid in self._children():
            if pid in self._own:
                continue
            try:
                with open(f"{self._proc}/{pid}/environ", "rb") as fh:
                    tag = tag_of(fh.read())
            except OSError:  # gone meanwhile
                continue
            found.append((pid, tag))
        return found

    def _children(self) -> list[int]:
        """Our children's pids: from each of our threads' `children` list (a few small files: this
        runs after every tool run), else from every process's parent link (a scan of /proc)."""
        try:
            tasks = os.listdir(f"{self._proc}/{self._pid}/task")
        except OSError:
            tasks = []
        pids: set[int] = set()
        listed = False
        for task in tasks:
            try:
                with open(f"{self._proc}/{self._pid}/task/{task}/children", encoding="ascii") as fh:
                    pids.update(int(p) for p in fh.read().split())
                listed = True
            except (OSError, ValueError):
                continue
        return sorted(pids) if listed else self._scan()

    def _scan(self) -> list[int]:
        pids: list[int] = []
        try:
            entries = os.listdir(self._proc)
        except OSError:
            return pids
        for entry in entries:
            if not entry.isdigit():
                continue
            try:
                with open(f"{self._proc}/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                    if parent_of(fh.read()) == self._pid:
                        pids.append(int(entry))
            except OSError:
                continue
        return pids

    def sweep(self) -> int:
        """Kill and reap every orphan whose run is not going on; return how many."""
        if not self.active or self._spawning:
            return 0
        count = 0
        for pid, tag in self.orphans():
            if tag is not None and tag in self._runs:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # a zombie now or soon; the next sweep reaps it if not
            count += 1
        if count:
            self.killed += count
            log.info("stopped processes left behind by ended runs", count=count)
        return count

    async def serve(self) -> None:
        """Sweep every `SWEEP_EVERY_S` until cancelled."""
        while True:
            await trio.sleep(SWEEP_EVERY_S)
            self.sweep()

    async def final_sweep(self) -> None:
        """The gateway has stopped every run: sweep until no orphan is left (bounded, shielded),
        as orphans appear while their parents die."""
        with trio.CancelScope(shield=True), trio.move_on_after(FINAL_SWEEP_S):
            self._runs.clear()
            while self.active and self.orphans():
                self.sweep()
                await trio.sleep(0.02)


class RunScope:
    """One run: the environment to start its process with, and the pids started under it."""

    def __init__(self, reaper: Reaper, env: dict[str, str]) -> None:
        self._reaper = reaper
        self.env = env
        self.pids: list[int] = []

    def started(self, pid: int) -> None:
        self.pids.append(pid)
        self._reaper._own.add(pid)


# One per process: every spawn site runs its children under it. Inactive (and harmless) until a
# gateway process calls `activate()`.
REAPER = Reaper()
