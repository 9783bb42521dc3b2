"""A patch for ablate.py: timestamps along one forwarded call's critical path, in the gateway.

    python bench/ablate.py bench/trace_path.py      # then read /tmp/tfunnel-trace.txt

Wraps the hot-path entry points with `perf_counter_ns` marks and, at exit, writes the median
time between consecutive marks over the calls that passed every mark (the first 300, the warm-up,
left out) to $TFUNNEL_TRACE (default /tmp/tfunnel-trace.txt). Each mark costs about 1 µs, so the
traced gateway is slightly slower than the plain one. It names internals, so it breaks when they
are renamed: it is a measuring tool, not part of the product.
"""

import atexit
import itertools
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import tfunnel.proc.linewriter as linewriter
import tfunnel.route.router as router
import tfunnel.serve.connection as connection
import tfunnel.serve.stdio as stdio
import tfunnel.surface.service as service
import tfunnel.upstream.session as session
import tfunnel.upstream.supervisor as supervisor

ORDER = ("line in", "request task runs", "router", "surface", "upstream tool", "supervisor",
         "session request", "write upstream", "upstream written", "response in", "caller resumed",
         "reply written")
_now = time.perf_counter_ns
_marks: dict[str, int] = {}
_gaps: dict[str, list[int]] = {}


def _wrap(owner: Any, name: str, mark: str, after: bool = False) -> None:
    original: Callable[..., Any] = getattr(owner, name)

    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        if not after:
            _marks[mark] = _now()
        result = await original(*args, **kwargs)
        if after:
            _marks[mark] = _now()
        return result

    setattr(owner, name, wrapped)


_feed = session.ClientCore.feed


def _feed_marked(self: Any, data: Any) -> Any:
    _marks["response in"] = _now()
    return _feed(self, data)


session.ClientCore.feed = _feed_marked  # type: ignore[method-assign]
_wrap(stdio.StdioServer, "_dispatch", "line in")
_wrap(connection.Connection, "_run", "request task runs")
_wrap(router.Router, "handle", "router")
_wrap(service.Surface, "call", "surface")
_wrap(service.Surface, "_run_upstream", "upstream tool")
_wrap(supervisor.Supervisor, "call_tool", "supervisor")
_wrap(session.UpstreamSession, "request", "session request")
_wrap(session.UpstreamSession, "_write", "write upstream")
_wrap(session.UpstreamSession, "_wait", "caller resumed", after=True)
_write = linewriter.LineWriter.write


async def _write_marked(self: Any, line: bytes) -> None:
    await _write(self, line)
    if b'"method":"tools/call"' in line:
        _marks["upstream written"] = _now()
    elif b'"result"' in line and all(mark in _marks for mark in ORDER[:-1]):
        _marks["reply written"] = _now()
        for a, b in itertools.pairwise(ORDER):
            _gaps.setdefault(f"{a} -> {b}", []).append(_marks[b] - _marks[a])
        _marks.clear()


linewriter.LineWriter.write = _write_marked  # type: ignore[method-assign]


@atexit.register
def _report() -> None:
    with open(os.environ.get("TFUNNEL_TRACE", "/tmp/tfunnel-trace.txt"), "w") as out:
        for gap, values in _gaps.items():
            kept = values[300:] or values
            out.write(f"{gap:40s} median {statistics.median(kept) / 1000:7.1f} µs  (n={len(kept)})\n")
