"""What the supervisor lists and asks of an upstream beyond tools, on the scripted transport:
prompts, resources and templates (declared ones only, every page), re-listed by kind on
list_changed; what clients asked (subscriptions, a log level), sent on ready, kept and replayed
on the next incarnation; other notifications handed to the gateway."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.test_supervisor_scripted import factory
from tfunnel.config.expose import ExposeConfig, RestartPolicy, UpstreamSpec
from tfunnel.config.model import Limits
from tfunnel.protocol.jsonrpc import Notification
from tfunnel.testing.scripted import Script, ScriptedServer, ScriptedTransport
from tfunnel.upstream.states import Context, Identity
from tfunnel.upstream.supervisor import State, Supervisor

pytestmark = pytest.mark.timeout(30)

FAST = RestartPolicy(initial_backoff_s=0.01, max_backoff_s=0.01)
ONE = ExposeConfig(upstreams=(UpstreamSpec(id="u", command="x", restart=FAST),))
PROMPTS = ({"name": "p1"}, {"name": "p2"})
RESOURCES = tuple({"uri": f"file:///r{i}", "name": f"r{i}"} for i in range(5))
TEMPLATES = ({"uriTemplate": "doc://{id}", "name": "doc"},)


class Gateway:
    def __init__(self) -> None:
        self.changes = 0
        self.notes: list[tuple[str, Notification]] = []

    def context(self, tmp_path: Path) -> Context:
        def changed() -> None:
            self.changes += 1
        return Context(tmp_path, {}, Limits(), Identity("t", "0"), changed,
                       lambda upstream, note: self.notes.append((upstream, note)), jitter=lambda: 0.5)


async def wait_for(predicate: Callable[[], bool]) -> None:
    with trio.fail_after(10):  # a hang fails here, with the test's own traceback
        while not predicate():
            await trio.sleep(0.001)


def methods(server: ScriptedServer) -> list[Any]:
    return [m.get("method") for m in server.received if "id" in m]


async def test_declared_lists_are_listed_every_page_and_undeclared_ones_not_asked(tmp_path: Path) -> None:
    bare = ScriptedTransport(Script())
    rich = ScriptedTransport(Script(prompts=PROMPTS, resources=RESOURCES, templates=TEMPLATES, page_size=2))
    config = ExposeConfig(upstreams=(UpstreamSpec(id="bare", command="x"),
                                     UpstreamSpec(id="rich", command="x")))
    supervisor = Supervisor(Gateway().context(tmp_path), transports=factory({"bare": bare, "rich": rich}))
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run, config)
        lists = supervisor.ready_lists()
        assert lists["bare"] == {"tools": lists["bare"]["tools"]}  # no prompts or resources asked for
        assert [p["name"] for p in lists["rich"]["prompts"]] == ["p1", "p2"]
        assert [r["uri"] for r in lists["rich"]["resources"]] == [r["uri"] for r in RESOURCES]
        assert lists["rich"]["templates"] == TEMPLATES
        nursery.cancel_scope.cancel()
    assert "prompts/list" not in methods(bare.servers[0])
    assert methods(rich.servers[0]).count("resources/list") == 3  # 5 resources, 2 a page


async def test_a_list_changed_relists_its_kind_only_and_tells_the_gateway(tmp_path: Path) -> None:
    transport = ScriptedTransport(Script(prompts=PROMPTS, resources=RESOURCES))
    gateway = Gateway()
    supervisor = Supervisor(gateway.context(tmp_path), transports=factory({"u": transport}))
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run, ONE)
        server = transport.servers[0]
        before, changes = methods(server), gateway.changes
        server.script = Script(prompts=({"name": "p3"},), resources=RESOURCES)
        await server.notify("notifications/prompts/list_changed")
        await wait_for(lambda: [p["name"] for p in supervisor.ready_lists()["u"]["prompts"]] == ["p3"])
        assert methods(server)[len(before):] == ["prompts/list"]
        assert gateway.changes == changes + 1
        await server.notify("notifications/resources/updated", {"uri": "file:///r1"})
        await server.notify("notifications/message", {"level": "info", "data": "x"})
        await wait_for(lambda: len(gateway.notes) == 2)
        assert [(u, n.method) for u, n in gateway.notes] == [
            ("u", "notifications/resources/updated"), ("u", "notifications/message")]
        # Announced again with nothing new: now the announcement itself is told (once).
        await server.notify("notifications/prompts/list_changed")
        await wait_for(lambda: len(gateway.notes) == 3)
        assert gateway.notes[-1][1].method == "notifications/prompts/list_changed"
        assert gateway.changes == changes + 1
        nursery.cancel_scope.cancel()


async def test_what_clients_asked_is_sent_on_ready_and_replayed_after_a_restart(tmp_path: Path) -> None:
    script = Script(resources=RESOURCES, subscribe=True, logging=True)
    transport = ScriptedTransport(script)
    supervisor = Supervisor(Gateway().context(tmp_path), transports=factory({"u": transport}))
    supervisor.set_subscriptions("u", frozenset({"file:///r1", "file:///r2"}))  # before it exists
    supervisor.set_log_level("debug")
    asked = ("logging/setLevel", "resources/subscribe", "resources/unsubscribe")

    def requests(server: ScriptedServer) -> list[tuple[Any, Any]]:
        return [(m["method"], m["params"].get("uri", m["params"].get("level"))) for m in server.received
                if m.get("method") in asked]

    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run, ONE)
        first = transport.servers[0]
        # The level first (an upstream may log about the subscriptions), then each URI once.
        await wait_for(lambda: len(requests(first)) == 3)
        assert requests(first) == [("logging/setLevel", "debug"), ("resources/subscribe", "file:///r1"),
                                   ("resources/subscribe", "file:///r2")]
        supervisor.set_subscriptions("u", frozenset({"file:///r2"}))
        await wait_for(lambda: len(requests(first)) == 4)
        assert requests(first)[-1] == ("resources/unsubscribe", "file:///r1")
        first.exit(1)
        await wait_for(lambda: len(transport.servers) == 2 and supervisor.upstreams["u"].state is State.READY)
        second = transport.servers[1]
        await wait_for(lambda: len(requests(second)) == 2)
        assert requests(second) == [("logging/setLevel", "debug"), ("resources/subscribe", "file:///r2")]
        nursery.cancel_scope.cancel()
