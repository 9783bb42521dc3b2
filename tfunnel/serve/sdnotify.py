"""sd_notify, hand-rolled: service-manager notifications as datagrams to `$NOTIFY_SOCKET`.

No libsystemd: the protocol is one `AF_UNIX`/`SOCK_DGRAM` datagram of newline-separated
`KEY=value` assignments (sd_notify(3)). `Notifier.from_env` reads `NOTIFY_SOCKET` (a filesystem
path, or an abstract socket written `@name`), `WATCHDOG_USEC` and `WATCHDOG_PID`; the gateway calls
`ready`/`status`/`reloading`/`stopping` at its lifecycle points and runs `run_watchdog` as a task.

Error contract: nothing here raises. Notifications are best-effort — the service must run the same
with or without a service manager — so a missing `NOTIFY_SOCKET` makes every method a no-op, and a
send that fails (no listener, a full socket buffer, a bad address) is dropped and logged once. If
anything besides a programming error escapes this module, that's a bug.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from types import TracebackType

import structlog
import trio

log = structlog.get_logger("tfunnel.sdnotify")

# Pet the watchdog at half its timeout, as sd_watchdog_enabled(3) advises: one late tick (a GC
# pause, a slow reload) must not get a healthy gateway killed.
_WATCHDOG_FRACTION = 0.5
_USEC_PER_S = 1_000_000


class Notifier:
    """Sends sd_notify messages; built from the environment with `from_env`.

    `address` is what `socket.sendto` takes (a path, or "\\0name" for an abstract socket); None
    disables every notification. The socket is opened on first use, kept, and freed by `close`.
    """

    def __init__(self, address: str | None, *, watchdog_usec: int | None = None) -> None:
        self.address = address
        # A watchdog with nowhere to report to would only burn wake-ups.
        self._watchdog_usec = watchdog_usec if address is not None else None
        self._sock: socket.socket | None = None
        self._failure_logged = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Notifier:
        """Read NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID; unusable values disable that part."""
        return cls(_address(environ.get("NOTIFY_SOCKET", "")), watchdog_usec=_watchdog_usec(environ))

    @property
    def enabled(self) -> bool:
        """Whether there is a service manager to notify."""
        return self.address is not None

    @property
    def watchdog_interval_s(self) -> float | None:
        """Seconds between WATCHDOG=1 pings (half of WATCHDOG_USEC); None when no watchdog is on."""
        if self._watchdog_usec is None:
            return None
        return self._watchdog_usec * _WATCHDOG_FRACTION / _USEC_PER_S

    def ready(self, status: str | None = None) -> None:
        """Startup (or a reload) is complete: READY=1, with an optional STATUS= line."""
        self.send("READY=1", *(() if status is None else (_status(status),)))

    def status(self, text: str) -> None:
        """A free-form one-line status shown by `systemctl status`."""
        self.send(_status(text))

    def reloading(self) -> None:
        """A reload began; `ready()` ends it. MONOTONIC_USEC is mandatory for Type=notify-reload."""
        monotonic_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.send("RELOADING=1", f"MONOTONIC_USEC={monotonic_usec}")

    def stopping(self) -> None:
        """Shutdown began (the drain grace is running)."""
        self.send("STOPPING=1")

    def watchdog(self) -> None:
        """One keep-alive ping for WatchdogSec=."""
        self.send("WATCHDOG=1")

    def send(self, *assignments: str) -> bool:
        """Send `KEY=value` assignments as one datagram; True if it was sent. Never raises."""
        if self.address is None or not assignments:
            return False
        try:
            if self._sock is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                # Never block the event loop: a full receive queue drops this message instead.
                sock.setblocking(False)
                self._sock = sock
            self._sock.sendto("\n".join(assignments).encode(), self.address)
        except OSError as exc:
            self._failed(exc, assignments)
            return False
        return True

    async def run_watchdog(self) -> None:
        """Ping the watchdog every `watchdog_interval_s` until cancelled; return at once when no
        watchdog is configured. Runs on the event loop on purpose: a wedged loop stops the pings
        and systemd restarts the service."""
        interval = self.watchdog_interval_s
        if interval is None:
            return
        while True:
            self.watchdog()
            await trio.sleep(interval)

    def close(self) -> None:
        """Free the socket; a later notification opens a new one."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> Notifier:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _failed(self, exc: OSError, assignments: tuple[str, ...]) -> None:
        # Once per notifier: a missing listener fails every watchdog tick, and a log line per tick
        # would flood the journal with one fact.
        if self._failure_logged:
            return
        self._failure_logged = True
        log.warning("sd_notify send failed; later failures are not logged",
                    address=_printable(self.address), message=assignments[0], error=repr(exc))


def _address(value: str) -> str | None:
    if not value:
        return None
    if value.startswith("@"):
        # The Linux abstract namespace: the name starts with a NUL byte and has no file.
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    # sd_notify(3) accepts only absolute paths and "@" names (vsock: is systemd 253+, not ours).
    log.warning("NOTIFY_SOCKET is not an absolute path or @name; notifications disabled", value=value)
    return None


def _watchdog_usec(environ: Mapping[str, str]) -> int | None:
    try:
        usec = int(environ.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    if usec <= 0:
        return None
    pid = environ.get("WATCHDOG_PID")
    if pid is not None:
        # Set for the main process only; a child that inherited our environment must not ping.
        try:
            if int(pid) != os.getpid():
                return None
        except ValueError:
            return None
    return usec


def _status(text: str) -> str:
    # A newline would start a new assignment and could forge READY=1 or STOPPING=1.
    return "STATUS=" + " ".join(text.splitlines())


def _printable(address: str | None) -> str | None:
    return "@" + address[1:] if address is not None and address.startswith("\0") else address
