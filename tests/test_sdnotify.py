"""sd_notify against a real unix datagram socket standing in for systemd."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog.testing
import trio

from tfunnel.serve.sdnotify import Notifier

pytestmark = pytest.mark.timeout(30)

# Far longer than a local datagram takes, short enough that a missing message fails fast.
RECV_TIMEOUT_S = 5.0


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """A bound datagram socket in tmp_path and the NOTIFY_SOCKET value that reaches it."""
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    with sock:
        sock.bind(str(path))
        sock.settimeout(RECV_TIMEOUT_S)
        yield sock, str(path)


def recv(sock: socket.socket) -> bytes:
    return sock.recv(4096)


def test_lifecycle_messages_arrive_exactly(listener: tuple[socket.socket, str]) -> None:
    """ready/status/stopping/watchdog send exactly the documented datagrams."""
    sock, address = listener
    with Notifier.from_env({"NOTIFY_SOCKET": address}) as notifier:
        assert notifier.enabled
        notifier.ready("serving: 2/3 upstreams ready")
        assert recv(sock) == b"READY=1\nSTATUS=serving: 2/3 upstreams ready"
        notifier.ready()
        assert recv(sock) == b"READY=1"
        notifier.status("degraded")
        assert recv(sock) == b"STATUS=degraded"
        notifier.stopping()
        assert recv(sock) == b"STOPPING=1"
        notifier.watchdog()
        assert recv(sock) == b"WATCHDOG=1"


def test_reloading_carries_the_monotonic_clock(listener: tuple[socket.socket, str]) -> None:
    """reloading sends RELOADING=1 with MONOTONIC_USEC read from CLOCK_MONOTONIC."""
    sock, address = listener
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    with Notifier.from_env({"NOTIFY_SOCKET": address}) as notifier:
        notifier.reloading()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    first, second = recv(sock).decode().split("\n")
    assert first == "RELOADING=1"
    key, value = second.split("=")
    assert key == "MONOTONIC_USEC"
    assert before <= int(value) <= after


def test_status_newlines_cannot_forge_assignments(listener: tuple[socket.socket, str]) -> None:
    """A newline inside a status is flattened, so it cannot smuggle READY=1 or STOPPING=1."""
    sock, address = listener
    with Notifier.from_env({"NOTIFY_SOCKET": address}) as notifier:
        notifier.status("ok\nSTOPPING=1")
    assert recv(sock) == b"STATUS=ok STOPPING=1"


def test_abstract_socket_address() -> None:
    """An "@name" NOTIFY_SOCKET reaches the abstract-namespace socket "\\0name"."""
    name = f"tfunnel-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(RECV_TIMEOUT_S)
        with Notifier.from_env({"NOTIFY_SOCKET": "@" + name}) as notifier:
            notifier.ready("up")
        assert recv(sock) == b"READY=1\nSTATUS=up"


@pytest.mark.parametrize("value", [None, "", "relative/notify.sock"])
def test_no_usable_notify_socket_makes_every_method_a_noop(value: str | None) -> None:
    """Without a usable NOTIFY_SOCKET every method does nothing and nothing is opened."""
    environ = {"WATCHDOG_USEC": "200000"} if value is None else {"NOTIFY_SOCKET": value}
    with Notifier.from_env(environ) as notifier:
        assert not notifier.enabled
        assert notifier.watchdog_interval_s is None
        notifier.ready("up")
        notifier.status("x")
        notifier.reloading()
        notifier.stopping()
        notifier.watchdog()
        assert notifier.send("READY=1") is False


def test_missing_socket_path_is_dropped_and_logged_once(tmp_path: Path) -> None:
    """Sends to a path with no listener never raise, and the failure is logged only once."""
    with (structlog.testing.capture_logs() as logs,
          Notifier.from_env({"NOTIFY_SOCKET": str(tmp_path / "absent.sock")}) as notifier):
        notifier.ready("up")
        notifier.watchdog()
        notifier.stopping()
        assert notifier.send("WATCHDOG=1") is False
    failures = [entry for entry in logs if entry["event"].startswith("sd_notify send failed")]
    assert len(failures) == 1
    assert failures[0]["log_level"] == "warning"


def test_close_then_send_reopens(listener: tuple[socket.socket, str]) -> None:
    """close frees the socket, and a later notification still goes out on a fresh one."""
    sock, address = listener
    with Notifier.from_env({"NOTIFY_SOCKET": address}) as notifier:
        notifier.watchdog()
        notifier.close()
        notifier.close()
        notifier.stopping()
    assert recv(sock) == b"WATCHDOG=1"
    assert recv(sock) == b"STOPPING=1"


@pytest.mark.parametrize("pid", [None, "self"])
def test_watchdog_interval_is_half_of_watchdog_usec(pid: str | None) -> None:
    """WATCHDOG_USEC=200000 gives a 0.1 s interval, with WATCHDOG_PID absent or ours."""
    environ = {"NOTIFY_SOCKET": "/run/notify", "WATCHDOG_USEC": "200000"}
    if pid is not None:
        environ["WATCHDOG_PID"] = str(os.getpid())
    with Notifier.from_env(environ) as notifier:
        assert notifier.watchdog_interval_s == pytest.approx(0.1)


@pytest.mark.parametrize("environ", [
    {},
    {"WATCHDOG_USEC": "0"},
    {"WATCHDOG_USEC": "-5"},
    {"WATCHDOG_USEC": "soon"},
    {"WATCHDOG_USEC": "200000", "WATCHDOG_PID": str(os.getpid() + 1)},
    {"WATCHDOG_USEC": "200000", "WATCHDOG_PID": "main"},
])
def test_no_watchdog_when_unset_invalid_or_for_another_pid(environ: dict[str, str]) -> None:
    """Unset, non-positive or garbled WATCHDOG_USEC, or another WATCHDOG_PID, means no watchdog."""
    with Notifier.from_env({"NOTIFY_SOCKET": "/run/notify", **environ}) as notifier:
        assert notifier.watchdog_interval_s is None


async def test_run_watchdog_pings_repeatedly(listener: tuple[socket.socket, str]) -> None:
    """run_watchdog sends WATCHDOG=1 again and again from the event loop until cancelled."""
    sock, address = listener
    received: list[bytes] = []
    with Notifier.from_env({"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "200000"}) as notifier:
        tsock = trio.socket.from_stdlib_socket(sock)
        with trio.fail_after(RECV_TIMEOUT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(notifier.run_watchdog)
                while len(received) < 3:
                    received.append(await tsock.recv(4096))
                nursery.cancel_scope.cancel()
    assert received == [b"WATCHDOG=1"] * 3


async def test_run_watchdog_returns_at_once_without_a_watchdog(
        listener: tuple[socket.socket, str]) -> None:
    """With no watchdog configured (here: another process's WATCHDOG_PID) run_watchdog returns."""
    _, address = listener
    environ = {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": str(os.getpid() + 1)}
    with Notifier.from_env(environ) as notifier, trio.fail_after(1):
        await notifier.run_watchdog()
