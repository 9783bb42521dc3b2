"""The legacy HTTP session store: least-recently-used eviction of idle sessions, expiry, and the
one end-of-session path both take."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trio
import trio.testing

from tfunnel.protocol.eras import Era
from tfunnel.protocol.jsonrpc import Notification, Request
from tfunnel.protocol.session import ClientSession
from tfunnel.serve.connection import Connection, Service
from tfunnel.serve.sessions import SessionStore, session_id
from tfunnel.surface.changes import Changes
from tfunnel.testing.cli import run

pytestmark = pytest.mark.timeout(10)


class Unrouted:
    """A router the store never reaches: these tests exercise only its bookkeeping."""

    async def handle(self, session: ClientSession, request: Request, peer: object = None, *,
                     era: Era) -> dict[str, object]:
        raise AssertionError("not routed")

    def notify(self, session: ClientSession, note: Notification) -> None:
        raise AssertionError("not routed")

    async def end_session(self, session: ClientSession) -> None:
        raise AssertionError("not routed")


def connect(client: ClientSession) -> Connection:
    return Connection(Service(Unrouted(), Changes(), lambda: True), client, ending=trio.Event())


async def test_the_cap_evicts_the_least_recently_used_idle_session_and_ends_it() -> None:
    """At the cap, create evicts the LRU idle session (a get counts as use; a session with a call
    or stream open is never taken) and hands it to run_ends; with all busy, create is refused."""
    ended: list[str] = []

    async def end(client: ClientSession) -> None:
        ended.append(client.id)

    store = SessionStore(max_sessions=3)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.run_ends, end)
        first, second, third = [s for s in [await store.create(connect) for _ in range(3)] if s is not None]
        first.inflight[1] = trio.CancelScope()  # busy: a call is open
        assert store.get(second.client.id) is second  # now third is the least recently used idle
        fourth = await store.create(connect)
        assert fourth is not None and store.get(third.client.id) is None and third.closed.is_set()
        await trio.testing.wait_all_tasks_blocked()
        assert ended == [third.client.id]
        second.streams = 1
        fourth.inflight[2] = trio.CancelScope()
        assert await store.create(connect) is None and len(store) == 3
        await trio.testing.wait_all_tasks_blocked()
        assert ended == [third.client.id]
        nursery.cancel_scope.cancel()


@pytest.mark.trio_clock
async def test_sessions_expired_at_create_are_ended_too() -> None:
    """Sessions found expired when another is created get their end (Stop hooks) as the reaper's do."""
    ended: list[str] = []

    async def end(client: ClientSession) -> None:
        ended.append(client.id)

    store = SessionStore(idle_expiry_s=60, max_sessions=10)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.run_ends, end)
        old = await store.create(connect)
        assert old is not None
        await trio.sleep(61)
        assert await store.create(connect) is not None
        await trio.testing.wait_all_tasks_blocked()
        assert ended == [old.client.id] and len(store) == 1
        assert trio.current_time() == 61
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("instance", "pattern"),
    [
        pytest.param(None, r"[A-Za-z0-9_-]{43}", id="alone"),
        pytest.param("a", r"a\.[A-Za-z0-9_-]{43}", id="named"),
        pytest.param("9001", r"9001\.[A-Za-z0-9_-]{43}", id="a-port"),
        pytest.param("x_y-Z" * 6 + "ab", r"(x_y-Z){6}ab\.[A-Za-z0-9_-]{43}", id="longest"),
    ],
)
def test_an_instances_session_ids_start_with_its_name(instance: str | None, pattern: str) -> None:
    """Behind a proxy, the id tells which instance minted the session: the name, one ".", then
    the unguessable part (no "." in it, so the first "." ends the name)."""
    ids = {session_id(instance) for _ in range(50)}
    assert len(ids) == 50
    assert all(re.fullmatch(pattern, minted) for minted in ids)


@pytest.mark.parametrize("instance", ["", "a.b", "a b", "é", "x" * 33, "a/b", "a\n"])
def test_a_name_a_proxy_rule_could_not_match_is_refused(instance: str) -> None:
    with pytest.raises(ValueError, match="instance name"):
        SessionStore(instance=instance)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        pytest.param(["serve", "--http", "--instance", "a.b"], "--instance: must be 1 to 32", id="dot"),
        pytest.param(["serve", "--instance", "a"], "--instance goes with --http", id="stdio"),
    ],
)
def test_the_instance_option_is_checked(home: Path, argv: list[str], needle: str) -> None:
    done = run(home, *argv)
    assert done.returncode == 2 and needle in done.stderr
