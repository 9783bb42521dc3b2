"""The HTTP service's composition: the checks before it binds (authentication, the bind rule), the
ASGI app and its parts, hypercorn's trio worker, systemd notifications and the drain at SIGTERM.
Split from `app.py` (the composition root of every face), which builds the gateway it serves."""

from __future__ import annotations

import os
import resource
from typing import TYPE_CHECKING

import structlog
import trio

from tfunnel.app import Gateway, Signals, reaping, running, upstream_status
from tfunnel.auth.config import AuthConfig
from tfunnel.errors import ConfigError
from tfunnel.proc.children import keep_child_nofile

if TYPE_CHECKING:
    import hypercorn.config

    from tfunnel.auth.gate import AuthGate
    from tfunnel.serve.http import HttpApp
    from tfunnel.serve.metrics import Metrics
    from tfunnel.serve.sdnotify import Notifier
    from tfunnel.ui.web import UiApp

log = structlog.get_logger("tfunnel.app")


class BindRefused(Exception):
    """`serve --http` was asked to listen on a non-loopback address without authentication on."""


async def run_http(gateway: Gateway, metrics: Metrics, host: str, port: int, grace_s: float,
                   ui: tuple[str, int] | None = None, instance: str | None = None) -> int:
    """Serve HTTP until SIGINT/SIGTERM (130/143): refuse new MCP requests (503) while the
    operations endpoints keep answering, let in-flight calls finish within `grace_s`, then close
    the listener, cancel the rest and close every upstream. SIGHUP reloads the config. With `ui`
    (host, port), the admin UI is served there too, until the drain ends. `instance`: this
    instance's name among several behind a proxy (it starts every session id)."""
    from tfunnel.serve.sdnotify import Notifier

    check_http(gateway, host)  # before anything starts: refused as itself, never inside a group
    signals = Signals(gateway)
    async with reaping():
        await serve_http(gateway, metrics, host, port, grace_s, signals, Notifier.from_env(os.environ),
                         ui=ui, instance=instance)
    return signals.exit_code


async def serve_http(gateway: Gateway, metrics: Metrics, host: str, port: int, grace_s: float,
                     signals: Signals, notifier: Notifier, *, ui: tuple[str, int] | None = None,
                     instance: str | None = None, listen: bool = True,
                     task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    """The HTTP service (see `run_http`) until its drain ends; reports the URLs it listens on once
    clients are served. `signals`: with `listen`, the process's own signals (the test harness
    delivers them itself)."""
    # Imported here, not at the top: the stdio gateway never needs the HTTP stack, and its cold
    # start (what a desktop client waits for) should not pay for importing it.
    import hypercorn.config

    from tfunnel.serve.connections import quiet_accept_errors, raise_fd_limit
    from tfunnel.serve.http import HttpApp
    from tfunnel.serve.sessions import SessionStore

    auth = check_http(gateway, host)
    live = gateway.live
    limits = live.settings.limits
    keep_child_nofile(resource.getrlimit(resource.RLIMIT_NOFILE))  # children keep what we had
    soft, hard = raise_fd_limit()
    log.debug("open-files limit", soft=soft, hard=hard)
    quiet_accept_errors()
    config = hypercorn.config.Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    # The grace is ours (`HttpApp.drain`, while the listener still serves the health endpoints);
    # when hypercorn is told to shut down, whatever still runs is past it and is cancelled.
    config.graceful_timeout = 0
    config.accesslog = None
    config.errorlog = None  # our own log says what matters; hypercorn's would interleave raw lines
    config.h11_max_incomplete_size = 16 * 1024  # request line + headers
    config.backlog = 64
    # hypercorn's keep-alive timer runs whenever a connection is outside a request: idle between
    # requests, and from the connection's start (or the previous answer) until a request's head
    # is complete. So it is also the deadline for a slow head; a slow body is `HttpApp`'s (408).
    config.keep_alive_timeout = limits.idle_timeout_s
    # hypercorn closes a keep-alive connection after 1000 requests by default; a client driving a
    # long session would reconnect every 1000 calls for no benefit.
    config.keep_alive_max_requests = 1_000_000
    # No read timeout: hypercorn applies it to the whole connection, which would cut off tool
    # calls and notification streams that legitimately last minutes.
    gate = _auth_gate(gateway, auth, metrics) if auth is not None else None
    app = HttpApp(gateway.router, live, gateway.supervisor, gateway.surface.tally,
                  SessionStore(max_sessions=limits.max_sessions, instance=instance), metrics, gate,
                  telemetry=gateway.surface.telemetry)
    shutdown = trio.Event()
    signals.on_reload_start = notifier.reloading
    signals.on_reload_done = lambda: notifier.ready(upstream_status(gateway))

    def stop() -> None:
        log.info("draining", grace_s=grace_s)
        notifier.stopping()
        app.stopping.set()

    async def drain_then_shut_down() -> None:
        # hypercorn closes its listener at the shutdown trigger, so the trigger waits for the end
        # of the drain: until then new connections are accepted and /health answers `stopping`.
        await app.stopping.wait()
        await app.drain(grace_s)
        shutdown.set()

    signals.on_stop = stop
    async with running(gateway) as nursery:
        if listen:
            await nursery.start(signals.run)
        # Token telemetry: counted only here, where /metrics and /health show it.
        await nursery.start(gateway.surface.telemetry.run)
        nursery.start_soon(drain_then_shut_down)
        nursery.start_soon(notifier.run_watchdog)
        nursery.start_soon(app.reap_idle_sessions)
        if gate is not None:
            # The keys are fetched and renewed in the gate's own task, never in a request's.
            await nursery.start(gate.run)
        urls = await nursery.start(_serve_http, app, config, shutdown)
        if ui is not None:
            from tfunnel.ui.server import serve_ui
            await nursery.start(serve_ui, ui_app(gateway), ui[0], ui[1], shutdown)
        # Clients are served from here on, upstreams or not; systemd and /readyz hear "ready"
        # once the upstreams have had their start window.
        log.info("listening", urls=urls, server=live.settings.server_name)
        task_status.started(urls)
        await live.started.wait()
        notifier.ready(upstream_status(gateway))
        await app.stopped.wait()
    notifier.close()


def check_http(gateway: Gateway, host: str) -> AuthConfig | None:
    """What the HTTP service refuses before it starts: a broken `auth/auth.config.json`
    (`ConfigError`), a non-loopback bind without authentication (`BindRefused`); else its
    authentication (None: off)."""
    from tfunnel.serve.loopback import bind_refusal

    auth = http_auth(gateway)
    refusal = bind_refusal(host, authenticated=auth is not None)  # on the name as given: nothing resolved
    if refusal is not None:
        raise BindRefused(refusal)
    return auth


def ui_app(gateway: Gateway) -> UiApp:
    """The admin UI beside this gateway: its live surface, hooks and supervisor, and its
    management runner (changes apply at once)."""
    from tfunnel.observe.tokens import Counter
    from tfunnel.ui.live import Hub
    from tfunnel.ui.views import Source
    from tfunnel.ui.web import UiApp

    management = gateway.management
    assert management is not None
    live = gateway.live
    return UiApp(Source("gateway", management, management.env, gateway.audit, lambda: live.hooks,
                        Counter(live.settings.tokens)), Hub())


def http_auth(gateway: Gateway) -> AuthConfig | None:
    """The HTTP service's authentication (None: off); raise `ConfigError` when
    `auth/auth.config.json` is broken: the service never starts unauthenticated by mistake."""
    reading = gateway.auth
    if reading is None:
        return None
    if reading.problems:
        raise ConfigError(list(reading.problems))
    config = reading.value
    return config if config is not None and config.enabled else None


def _auth_gate(gateway: Gateway, config: AuthConfig, metrics: Metrics) -> AuthGate:
    from tfunnel.auth.gate import AuthGate
    from tfunnel.auth.jwks import KeyCache

    def denied(error: str, status: int, path: str) -> None:
        metrics.auth_denied(error)  # every one; the audit log gets them aggregated

    def record(document: dict[str, object]) -> None:
        gateway.audit.record("auth", **document)

    return AuthGate(config, KeyCache(config), denied, record=record)


async def _serve_http(app: HttpApp, config: hypercorn.config.Config, shutdown: trio.Event, *,
                      task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    import hypercorn.trio
    import hypercorn.trio.run

    from tfunnel.serve.connections import PromptCloseTCPServer

    # hypercorn's trio worker has no seam for its connection handler class; it looks the name up
    # in its module at each accept, so this is where ours goes in (see serve/connections.py).
    PromptCloseTCPServer.write_timeout_s = app.write_timeout_s
    hypercorn.trio.run.TCPServer = PromptCloseTCPServer  # type: ignore[attr-defined]
    try:
        await hypercorn.trio.serve(app, config, shutdown_trigger=shutdown.wait,  # type: ignore[arg-type]
                                   task_status=task_status)
    finally:
        app.stopped.set()
