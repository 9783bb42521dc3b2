"""Connections of the HTTP service beyond hypercorn's defaults: the fd limit, `EMFILE` at accept,
and sockets closed as soon as the peer closes.

- `raise_fd_limit`: every connection is a file descriptor; the soft `RLIMIT_NOFILE` (often 1024)
  is raised to the hard limit at start, so the hard limit (systemd's `LimitNOFILE=`) is the bound.
- `quiet_accept_errors`: when accept(2) fails for capacity (`EMFILE`, `ENFILE`, `ENOMEM`,
  `ENOBUFS`), `trio.serve_listeners` (which hypercorn's trio worker runs) logs the error with its
  traceback through stdlib logging and retries every 100 ms: ten tracebacks a second on stderr.
  A filter on its logger turns them into one line of our own log at most every
  `ACCEPT_ERROR_LOG_EVERY_S`, with the count.
- `PromptCloseTCPServer`: hypercorn keeps a connection whose peer closed while it was idle open
  until its keep-alive timer ends (the connection's task waits for that timer), leaving sockets in
  CLOSE-WAIT; this subclass stops the timer when the peer's end of the stream is read. It also
  bounds every write: hypercorn writes shielded from cancellation, so a peer that stops reading
  would hold the connection (and the app's task that writes to it) forever; a write that the peer
  does not take within `write_timeout_s` closes the connection instead.
"""

from __future__ import annotations

import logging
import resource
import time

import structlog
import trio
from hypercorn.events import Closed, Event, RawData
from hypercorn.trio.tcp_server import TCPServer

log = structlog.get_logger("tfunnel.http")

# One log line per this many seconds while accept keeps failing.
ACCEPT_ERROR_LOG_EVERY_S = 10.0
# trio's logger for accept failures (trio/_highlevel_serve_listeners.py).
_SERVE_LISTENERS_LOGGER = "trio.serve_listeners"


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; return (soft, hard) as now in force. A
    failure (a platform that refuses) is logged and the limit left as it was."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-files limit", soft=soft, hard=hard, error=str(exc))
    return soft, hard


class _AcceptErrorFilter(logging.Filter):
    """Swallow trio's accept-failure records; say so ourselves, rate-limited."""

    def __init__(self, every_s: float) -> None:
        super().__init__()
        self._every_s = every_s
        self._last = -float("inf")
        self._suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        self._suppressed += 1
        if now - self._last >= self._every_s:
            error = record.exc_info[1] if record.exc_info else None
            log.error("accept failing; new connections wait (raise LimitNOFILE= if it is too many "
                      "open files)", error=str(error) if error else record.getMessage(),
                      failures=self._suppressed)
            self._last = now
            self._suppressed = 0
        return False


def quiet_accept_errors(every_s: float = ACCEPT_ERROR_LOG_EVERY_S) -> None:
    """Install the rate-limited accept-failure line (once per process)."""
    logger = logging.getLogger(_SERVE_LISTENERS_LOGGER)
    if not any(isinstance(f, _AcceptErrorFilter) for f in logger.filters):
        logger.addFilter(_AcceptErrorFilter(every_s))


class PromptCloseTCPServer(TCPServer):
    """hypercorn's connection handler, closing as soon as the peer has closed, and when the peer
    does not take what we write within `write_timeout_s` (set from `limits.writeTimeoutS`)."""

    write_timeout_s = 30.0

    async def protocol_send(self, event: Event) -> None:
        if not isinstance(event, RawData):
            await super().protocol_send(event)
            return
        if not event.data:  # the end of a response whose length was given: nothing to write
            return
        async with self.send_lock:
            try:
                # Shielded as hypercorn's own write is (a half-written frame is worse than none),
                # but with a deadline of its own that no outer cancellation can override.
                with trio.CancelScope(shield=True,
                                      deadline=trio.current_time() + self.write_timeout_s) as deadline:
                    await self.stream.send_all(event.data)
                if deadline.cancelled_caught:
                    log.warning("client is not reading; connection closed", timeout_s=self.write_timeout_s)
                    await self.stream.aclose()
                    await self.protocol.handle(Closed())
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                await self.protocol.handle(Closed())

    async def _read_data(self) -> None:
        await super()._read_data()
        # The peer is gone (or the stream broke): an idle connection has nothing left to wait for.
        # A request in flight is unaffected: hypercorn has already told the app (http.disconnect).
        await self.idle_task.stop()
