"""Upstream log messages and resource updates for the clients that asked: the hub's rules
(`surface.notices`, table-driven), and a modern request's log level bringing a modern upstream's
log messages, behind the gateway in-process. With server-everything (npm, a program we did not
write) behind a real gateway process, where a legacy SDK client's subscription and log level
survive a kill of the upstream (replayed): tests/e2e/test_breadth_notices.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from mcp.types import LoggingMessageNotification, ResourceUpdatedNotification

from tests.test_modern_stdio import META, modern
from tests.upstreams import set_upstreams
from tfunnel.protocol.jsonrpc import Notification
from tfunnel.surface.notices import Notices
from tfunnel.testing.gateway import stdio_gateway as gateway

pytestmark = pytest.mark.timeout(120)


class Hub:
    """A `Notices` with recording callbacks and pushes."""

    def __init__(self) -> None:
        self.subscriptions: list[tuple[str, frozenset[str]]] = []
        self.levels: list[str | None] = []
        self.pushed: dict[str, list[dict[str, Any]]] = {}
        self.hub = Notices(lambda u, uris: self.subscriptions.append((u, uris)), self.levels.append)

    def push(self, name: str) -> Any:
        return self.pushed.setdefault(name, []).append


def message(level: str, logger: str | None = None) -> Notification:
    params: dict[str, Any] = {"level": level, "data": "d"}
    if logger is not None:
        params["logger"] = logger
    return Notification("notifications/message", params)


# (listener level, message level, delivered?)
LEVEL_TABLE = [("debug", "debug", True), ("info", "debug", False), ("warning", "error", True),
               ("error", "warning", False), ("emergency", "emergency", True), ("debug", "bogus", False)]


@pytest.mark.parametrize(("wanted", "sent", "delivered"), LEVEL_TABLE)
def test_a_log_message_reaches_a_session_at_or_below_its_level(wanted: str, sent: str,
                                                               delivered: bool) -> None:
    h = Hub()
    h.hub.set_level("s", h.push("s"), wanted)
    h.hub.upstream_notice("up", message(sent))
    got = h.pushed.get("s", [])
    assert len(got) == (1 if delivered else 0)
    if delivered:
        assert got[0]["params"] == {"level": sent, "logger": "up", "data": "d"}


def test_log_messages_are_tagged_with_their_upstream_and_go_only_to_who_asked() -> None:
    h = Hub()
    h.hub.set_level("a", h.push("a"), "info")
    with h.hub.during("other", "debug", h.push("m")), h.hub.during("up", "debug", h.push("n")):
        h.hub.upstream_notice("up", message("info", "db"))
    h.hub.upstream_notice("up", message("info"))  # after the modern requests ended
    assert [m["params"]["logger"] for m in h.pushed["a"]] == ["up/db", "up"]
    assert [m["params"]["logger"] for m in h.pushed["n"]] == ["up/db"]
    assert h.pushed["m"] == []  # a modern request hears only the upstream it calls
    # The lowest level any legacy session asked for goes upstream; modern requests do not count.
    assert h.levels == ["info"]
    h.hub.set_level("b", h.push("b"), "debug")
    h.hub.drop("b")
    h.hub.drop("a")
    assert h.levels == ["info", "debug", "info", None]


def test_subscriptions_fan_in_per_upstream_and_updates_fan_out_with_each_clients_uri() -> None:
    h = Hub()
    h.hub.subscribe("a", h.push("a"), "up", "file:///x", "file:///x")
    h.hub.subscribe("b", h.push("b"), "up", "file:///x", "tfunnel+up:file:///x")
    h.hub.subscribe("b", h.push("b"), "up", "file:///y", "tfunnel+up:file:///y")
    with h.hub.listening("L", h.push("L"), {("up", "file:///x"): "file:///x"}, {"sid": 7}):
        h.hub.upstream_notice("up", Notification("notifications/resources/updated", {"uri": "file:///x"}))
        h.hub.upstream_notice("other", Notification("notifications/resources/updated", {"uri": "file:///x"}))
    assert [m["params"] for m in h.pushed["a"]] == [{"uri": "file:///x"}]
    assert [m["params"] for m in h.pushed["b"]] == [{"uri": "tfunnel+up:file:///x"}]
    assert [m["params"] for m in h.pushed["L"]] == [{"uri": "file:///x", "_meta": {"sid": 7}}]
    h.hub.unsubscribe("a", "up", "file:///x")
    h.hub.drop("b")
    # Each change of the union is told once, with the whole set: two subscribers of x, one of y.
    assert h.subscriptions == [("up", frozenset({"file:///x"})), ("up", frozenset({"file:///x", "file:///y"})),
                               ("up", frozenset())]


def test_under_a_wrap_only_the_wrapped_upstreams_notices_reach_clients_as_it_wrote_them() -> None:
    wrapped: list[str | None] = ["up"]
    pushed: list[dict[str, Any]] = []
    hub = Notices(wrapped=lambda: wrapped[0])
    hub.set_level("s", pushed.append, "debug")
    hub.subscribe("s", pushed.append, "other", "file:///x", "file:///x")
    hub.subscribe("s", pushed.append, "up", "file:///y", "file:///y")
    hub.upstream_notice("up", message("info", "db"))
    hub.upstream_notice("up", message("info"))
    hub.upstream_notice("other", message("error", "db"))
    hub.upstream_notice("other", Notification("notifications/resources/updated", {"uri": "file:///x"}))
    hub.upstream_notice("up", Notification("notifications/resources/updated", {"uri": "file:///y"}))
    assert [m["params"] for m in pushed] == [{"level": "info", "logger": "db", "data": "d"},
                                             {"level": "info", "data": "d"}, {"uri": "file:///y"}]
    wrapped[0] = None  # unwrapped: every upstream's, tagged with its id
    hub.upstream_notice("other", message("error", "db"))
    assert pushed[-1]["params"] == {"level": "error", "logger": "other/db", "data": "d"}


class Notes:
    def __init__(self) -> None:
        self.updated: list[str] = []
        self.logs: list[tuple[str, str | None, Any]] = []
        self.arrived = trio.Event()

    async def __call__(self, message: Any) -> None:
        root = getattr(message, "root", message)
        if isinstance(root, ResourceUpdatedNotification):
            self.updated.append(str(root.params.uri))
        elif isinstance(root, LoggingMessageNotification):
            self.logs.append((root.params.level, root.params.logger, root.params.data))
        else:
            return
        self.arrived.set()
        self.arrived = trio.Event()

    async def until(self, what: Any) -> None:
        with trio.fail_after(20):
            while not what():
                await self.arrived.wait()


async def health(http: httpx2.AsyncClient, url: str) -> dict[str, Any]:
    doc: dict[str, Any] = (await http.get(f"{url}/health")).json()["upstreams"]["everything"]
    return doc


URI = "demo://resource/static/document/architecture.md"


FIXTURE = Path(__file__).parent / "fixtures" / "conformance_server.py"


async def test_a_modern_requests_log_level_brings_its_upstreams_log_messages(home: Path) -> None:
    """A modern tools/call with `logLevel` gets the (modern) upstream's log messages on its own
    stream, tagged with the upstream; the same call without it gets none (PROTOCOL.md §3.2)."""
    set_upstreams(home, {"id": "test", "command": sys.executable, "args": [str(FIXTURE)],
                         "allowOutsidePaths": True},
                  expose=[{"upstream": "test", "tool": "tool_with_logging", "as": "logging_tool"}])
    call = {"name": "logging_tool", "arguments": {}}
    async with gateway(home) as wire:
        await wire.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                         "params": modern(call, {**META, "io.modelcontextprotocol/logLevel": "debug"})})
        before: list[dict[str, Any]] = []
        while "id" not in (message := await wire.recv()):
            before.append(message)
        assert "result" in message and not message["result"].get("isError"), message
        logs = [m["params"] for m in before if m.get("method") == "notifications/message"]
        assert len(logs) == 3 and all(log["logger"].split("/")[0] == "test" for log in logs), before
        reply = await wire.request(2, "tools/call", modern(call))
        assert "result" in reply
        assert not [m for m in wire.stash if m.get("method") == "notifications/message"]
