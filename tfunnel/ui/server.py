"""Serving the admin UI: its hypercorn listener on loopback, and `tfunnel ui` (the UI alone on a
home, no gateway: changes reach running gateways through their file watchers)."""

from __future__ import annotations

import signal
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import structlog
import trio

from tfunnel.config.home import child_environment
from tfunnel.config.load import load_settings
from tfunnel.config.model import Settings
from tfunnel.errors import ConfigError
from tfunnel.gate.manifest import HookManifest, load_manifest
from tfunnel.manage.builtins import Management
from tfunnel.manage.ops_cmd import cli_env
from tfunnel.manage.tokens_cmd import offline_catalog
from tfunnel.observe.audit import CONFIG_FILE as LOG_CONFIG_FILE
from tfunnel.observe.audit import AuditLog, load_log_config
from tfunnel.observe.tokens import Counter
from tfunnel.surface.catalog import Catalog
from tfunnel.ui import guard
from tfunnel.ui.live import Hub, Pulse
from tfunnel.ui.views import Source
from tfunnel.ui.web import UiApp
from tfunnel.upstream.states import Context, Identity
from tfunnel.upstream.supervisor import Supervisor

log = structlog.get_logger("tfunnel.ui")


class UiBindRefused(Exception):
    """The UI was asked to listen on an address that is not loopback, or cannot listen there."""


def check_bind(host: str) -> None:
    refusal = guard.bind_refusal(host)
    if refusal is not None:
        raise UiBindRefused(refusal)


async def serve_ui(app: UiApp, host: str, port: int, shutdown: trio.Event, *,
                   task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve `app` on `host:port` (loopback, checked again here) until `shutdown` is set; the
    bound URL is logged (`admin ui listening`) and handed to `task_status`."""
    import hypercorn.config

    check_bind(host)
    config = hypercorn.config.Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 1
    config.h11_max_incomplete_size = 16 * 1024
    config.websocket_max_message_size = 64 * 1024
    config.keep_alive_timeout = 30
    config.backlog = 16

    hub_pulse = Pulse(app.source.home, app.hub, lambda: app.source.audit.path, app.source.env.upstreams)
    async with trio.open_nursery() as nursery:
        await nursery.start(hub_pulse.run)
        try:
            urls = await nursery.start(_hypercorn, app, config, shutdown)
        except BaseExceptionGroup as group:  # the port is taken, or the address is not ours
            failed, _ = group.split(OSError)
            if failed is None:
                raise
            error = failed.exceptions[0]
            while isinstance(error, BaseExceptionGroup):
                error = error.exceptions[0]
            why = getattr(error, "strerror", None) or error
            raise UiBindRefused(f"the admin UI cannot listen on {host}:{port}: {why}") from None
        url = urls[0] if urls else f"http://{host}:{port}"
        log.info("admin ui listening", url=url)
        task_status.started(url)
        await shutdown.wait()
        nursery.cancel_scope.cancel()


async def _hypercorn(app: UiApp, config: object, shutdown: trio.Event, *,
                     task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    import hypercorn.trio

    await hypercorn.trio.serve(app, config, shutdown_trigger=shutdown.wait,  # type: ignore[arg-type]
                               task_status=task_status)


def standalone_source(home: Path) -> Source:
    """The views and operations of `tfunnel ui`: the home's files, no live gateway."""
    def catalog() -> Catalog | None:  # its upstream tools as last approved
        try:
            return offline_catalog(home)
        except ConfigError:
            return None

    settings = _settings(home)
    # Discovery connects an upstream once, apart from any gateway (none is supervised here).
    probe = Supervisor(Context(home, child_environment(home), settings.limits,
                               Identity(settings.client_name, settings.client_version), lambda: None))
    env = replace(cli_env(home), catalog=catalog, discover=probe.discover)
    audit = AuditLog(home)

    def applied(files: Iterable[str]) -> None:  # what gateways apply through their watchers
        if LOG_CONFIG_FILE in files:
            audit.apply(load_log_config(home)[0])  # the Activity view follows the log where it goes

    def hooks() -> HookManifest:
        try:
            return load_manifest(home)
        except ConfigError:
            return HookManifest(home / "hooks")

    return Source("standalone", Management(env, audit, applied), env, audit, hooks,
                  Counter(settings.tokens))


def _settings(home: Path) -> Settings:
    try:
        return load_settings(home)
    except ConfigError:
        return Settings()


async def run_standalone(home: Path, host: str, port: int | None) -> int:
    """`tfunnel ui`: serve until SIGINT or SIGTERM, then exit 0."""
    check_bind(host)
    source = standalone_source(home)
    app = UiApp(source, Hub())
    shutdown = trio.Event()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            async def stop_on_signal() -> None:
                async for _ in signals:
                    shutdown.set()
                    return
            nursery.start_soon(stop_on_signal)
            bound = _settings(home).ui_port if port is None else port
            await nursery.start(serve_ui, app, host, bound, shutdown)
            await shutdown.wait()
            nursery.cancel_scope.cancel()
    return 0
