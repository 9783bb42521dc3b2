"""The stdio writer (tfunnel.proc.linewriter): a peer that stops reading is given up on, not waited for."""

from __future__ import annotations

import os

import pytest
import trio
import trio.testing

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


async def read_exactly(stream: trio.abc.ReceiveStream, size: int, chunk: int = 7) -> bytes:
    data = b""
    while len(data) < size:
        data += await stream.receive_some(min(chunk, size - len(data)))
    return data


async def test_any_send_stream_gets_whole_lines_even_from_a_cancelled_caller() -> None:
    """On a stream that is not a pipe (here lockstep memory), a caller cancelled after its line
    began still leaves the whole line, and lines of concurrent writers never interleave."""
    send, receive = trio.testing.lockstep_stream_pair()
    writer = LineWriter(send)
    lines = [b'{"n": %d, "pad": "%s"}\n' % (n, b"x" * 40) for n in range(3)]
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            caller = trio.CancelScope()

            async def write_first() -> None:
                with caller:
                    await writer.write(lines[0])

            nursery.start_soon(write_first)
            head = await receive.receive_some(5)  # the first line has begun
            caller.cancel()
            for line in lines[1:]:
                nursery.start_soon(writer.write, line)
            received = head + await read_exactly(receive, sum(map(len, lines)) - len(head))
    assert received.startswith(lines[0]) and not writer.broken
    assert sorted(received.splitlines(keepends=True)) == sorted(lines)


async def test_any_send_stream_that_takes_nothing_breaks_the_writer_after_the_stall_window() -> None:
    """A client on a non-pipe stream that reads nothing for STALL_S is gone (on_broken once);
    this and later writes raise instead of waiting forever."""
    send, _receive = trio.testing.lockstep_stream_pair()
    broken: list[float] = []
    writer = LineWriter(send, lambda: broken.append(trio.current_time()), stall_before_first_byte=True)
    with trio.fail_after(60):
        with pytest.raises(trio.BrokenResourceError):
            await writer.write(b"{}\n")
        with pytest.raises(trio.BrokenResourceError):
            await writer.write(b"{}\n")
    assert broken == [STALL_S]
