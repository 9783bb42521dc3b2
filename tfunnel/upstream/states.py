"""What the supervisor's upstreams are made of: their states, what the gateway gives each one, and
the statistics record `/health`, `/metrics` and the CLI read (plain values, no I/O)."""

from __future__ import annotations

import enum
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from tfunnel.config.model import Limits
from tfunnel.protocol.jsonrpc import Notification

if TYPE_CHECKING:
    from tfunnel.upstream.session import ServerRequests


class State(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    BACKOFF = "backoff"
    STOPPED = "stopped"
    DISABLED = "disabled"


# States an upstream may still leave for READY without a config change.
COMING = frozenset({State.STARTING, State.BACKOFF})


@dataclass(frozen=True)
class Identity:
    """Who we are when talking to upstreams. `capabilities` (None: ours, elicitation) are what a
    legacy handshake declares: a client's own, when a stdio wrap mirrors it."""

    name: str
    version: str
    capabilities: Mapping[str, Any] | None = None

    def client_info(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version}


@dataclass(frozen=True)
class Mirror:
    """The client a stdio wrap presents upstream as itself: its identity, and who answers the
    upstream's requests that no call in flight answers (`roots/list` after a handshake, say)."""

    identity: Identity
    requests: ServerRequests | None = field(default=None, compare=False)


async def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Context:
    """What every upstream gets from the gateway: where it lives and how to report changes."""

    home: Path
    env: Mapping[str, str]
    limits: Limits
    identity: Identity
    on_change: Callable[[], None]
    # An upstream's notification other than progress and list_changed (resources/updated,
    # message): the upstream's id and the notification.
    on_notification: Callable[[str, Notification], None] = lambda upstream, note: None
    # A lifecycle record (`upstream/lifecycle.py`: connect, disconnect, ...) for the audit log.
    on_event: Callable[[dict[str, Any]], None] = lambda record: None
    jitter: Callable[[], float] = random.random  # in [0, 1); tests pin it
    # Set when the gateway stops by a signal: children are stopped without the usual graces.
    urgent: trio.Event = field(default_factory=trio.Event)
    # The wrapped upstream's id (`tfunnel wrap`), or None: the isolation guard is suspended for it
    # alone (SPEC §10), with a warning at each start.
    wrapped: Callable[[], str | None] = lambda: None
    # Returns once every `on_change` made so far is in the surface (the gateway rebuilds it once
    # per burst of changes: `home/rebuilds.py`); `wait_ready` waits for it.
    caught_up: Callable[[], Awaitable[None]] = _nothing


@dataclass(frozen=True)
class UpstreamStatistics:
    id: str
    state: str
    transport: str
    era: str | None
    protocol_version: str | None
    pid: int | None
    tools: int
    restarts: int
    since: str
    last_error: str | None
    stopped_reason: str | None


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
