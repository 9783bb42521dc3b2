"""The stdio writer (tfunnel.proc.linewriter): a peer that stops reading is given up on, not waited for."""

from __future__ import annotations

import os

import pytest
import trio

from tfunnel.proc.linewriter import STALL_S, LineWriter

pytestmark = [pytest.mark.trio_clock, pytest.mark.timeout(30)]


def full_pipe() -> tuple[int, int]:
    """A pipe whose buffer is full: the next write of any size would block."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    chunk = b"x" * 65536
    while True:
        try:
            os.write(write_fd, chunk)
        except BlockingIOError:
            try:
                while os.write(write_fd, b"x"):
                    pass
            except BlockingIOError:
                return read_fd, write_fd


async def test_a_peer_that_reads_nothing_breaks_the_writer_after_the_stall_window() -> None:
    """A line that cannot even start because the peer reads nothing: after STALL_S the writer is
    broken (on_broken once) and this and later writes raise, instead of waiting forever."""
    read_fd, write_fd = full_pipe()
    broken: list[float] = []
    writer = LineWriter(trio.lowlevel.FdStream(write_fd), lambda: broken.append(trio.current_time()),
                        stall_before_first_byte=True)
    with pytest.raises(trio.BrokenResourceError):
        await writer.write(b'{"jsonrpc": "2.0", "id": 1, "result": {}}\n')
    assert broken == [STALL_S]
    with pytest.raises(trio.BrokenResourceError):
        await writer.write(b"{}\n")
    assert len(broken) == 1
    await writer.aclose()
    os.close(read_fd)


async def test_an_upstream_writer_waits_for_a_busy_peer() -> None:
    """Without the client rule (an upstream's stdin), a peer that reads nothing for longer than
    STALL_S is still waited for: a single-threaded server busy with a long call is not gone."""
    read_fd, write_fd = full_pipe()
    writer = LineWriter(trio.lowlevel.FdStream(write_fd))
    with trio.move_on_after(STALL_S * 3) as waited:
        await writer.write(b"{}\n")
    assert waited.cancelled_caught and not writer.broken
    await writer.aclose()
    os.close(read_fd)


async def test_a_slow_reader_is_waited_for() -> None:
    """A peer that reads within the window gets the whole line: only a stalled one is dropped."""
    read_fd, write_fd = full_pipe()
    writer = LineWriter(trio.lowlevel.FdStream(write_fd))

    async def reader() -> None:
        await trio.sleep(STALL_S / 2)
        while True:
            await trio.lowlevel.wait_readable(read_fd)
            if not os.read(read_fd, 1 << 20):
                return

    os.set_blocking(read_fd, False)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await writer.write(b'{"line": "whole"}\n')
        assert not writer.broken
        await writer.aclose()
    os.close(read_fd)
