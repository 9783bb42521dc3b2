"""The admin UI's live updates, unit by unit: the audit tail, the hub's bounded pages, the pulse."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import trio

from tfunnel.ui.live import MAX_TAIL_BYTES, AuditTail, Hub, Pulse
from tfunnel.upstream.states import UpstreamStatistics


def line(**fields: Any) -> bytes:
    return (json.dumps(fields) + "\n").encode()


def test_the_tail_reads_only_what_was_appended_whole_lines_only(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    log.write_bytes(line(n=0))
    tail = AuditTail(lambda: log)
    assert tail.read_new() == []  # what was there before the page opened is the view's
    with open(log, "ab") as f:
        f.write(line(n=1) + b'{"n": 2')  # a record half-written
    assert tail.read_new() == [{"n": 1}]
    with open(log, "ab") as f:
        f.write(b"}\nnot json\n[1, 2]\n" + line(n=3))
    assert tail.read_new() == [{"n": 2}, {"n": 3}]  # junk and non-objects skipped
    assert tail.read_new() == []


def test_the_tail_follows_a_rotated_or_replaced_log(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    log.write_bytes(line(n=1) * 5)
    tail = AuditTail(lambda: log)
    os.replace(log, tmp_path / "audit.jsonl.1")  # rotation: a new file from its start
    log.write_bytes(line(n=2))
    assert tail.read_new() == [{"n": 2}]
    log.write_bytes(b"")  # truncated in place
    assert tail.read_new() == []
    with open(log, "ab") as f:
        f.write(line(n=3))
    assert tail.read_new() == [{"n": 3}]
    log.unlink()
    assert tail.read_new() == []


def test_the_tail_reads_a_burst_in_bounded_steps(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    log.write_bytes(b"")
    tail = AuditTail(lambda: log)
    record = line(pad="x" * 1000)
    log.write_bytes(record * (3 * MAX_TAIL_BYTES // len(record)))
    counts = []
    while got := tail.read_new():
        counts.append(len(got))
    assert len(counts) >= 3 and sum(counts) == 3 * MAX_TAIL_BYTES // len(record)


async def test_a_page_that_falls_behind_gets_one_resync_and_nothing_stale() -> None:
    hub = Hub(queue=4)
    with hub.subscribe() as slow, hub.subscribe() as fast:
        for n in range(10):
            hub.publish({"n": n})
            if n % 2 == 0:  # the fast page keeps up
                while True:
                    try:
                        fast.receive_nowait()
                    except trio.WouldBlock:
                        break
        got = []
        while True:
            try:
                got.append(slow.receive_nowait())
            except trio.WouldBlock:
                break
        assert {"type": "resync"} in got and len(got) <= 4
        assert got[-1] == {"n": 9}  # what came after the resync still arrives
        assert hub.pages == 2
    assert hub.pages == 0


def stats(uid: str, state: str, pid: int | None, tools: int) -> UpstreamStatistics:
    return UpstreamStatistics(uid, state, "stdio", "legacy", "2025-11-25", pid, tools, 0, "", None, None)


async def test_the_pulse_names_the_views_each_change_touches(tmp_path: Path) -> None:
    home = tmp_path
    (home / "tools").mkdir()
    (home / "logs").mkdir()
    log = home / "logs" / "audit.jsonl"
    upstreams = [stats("git", "ready", 10, 3)]
    hub = Hub()
    pulse = Pulse(home, hub, lambda: log, lambda: upstreams)
    with hub.subscribe() as page:
        def drained() -> list[dict[str, Any]]:
            out = []
            while True:
                try:
                    out.append(page.receive_nowait())
                except trio.WouldBlock:
                    return out

        pulse.tick()
        assert drained() == []
        (home / "tools" / "tools.state.json").write_text("{}")
        pulse.tick()
        assert drained() == [{"type": "changed", "what": ["upstreams", "tools", "surface"]}]
        upstreams[0] = stats("git", "backoff", None, 3)
        pulse.tick()
        assert drained() == [{"type": "changed", "what": ["upstreams"]}]
        upstreams[0] = stats("git", "ready", 11, 4)
        pulse.tick()
        assert drained() == [{"type": "changed", "what": ["upstreams", "tools", "surface"]}]
        log.write_bytes(line(type="gate", decision="deny"))
        pulse.tick()
        assert drained() == [{"type": "audit", "record": {"type": "gate", "decision": "deny"}}]
