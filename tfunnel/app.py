"""The composition root: builds every component from a home and runs them in named nurseries."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import structlog
import trio

from tfunnel.approvals.book import APPROVALS, APPROVALS_FILE
from tfunnel.approvals.first_sight import GATEWAY, first_sight
from tfunnel.approvals.keeper import Approvals
from tfunnel.auth.config import AUTH, AuthConfig
from tfunnel.config.expose import EXPOSE_FILE
from tfunnel.config.files import Reading
from tfunnel.config.home import child_environment
from tfunnel.config.load import REGISTER_FILE, STATE_FILE
from tfunnel.config.model import META_TOOL_NAMES, Settings
from tfunnel.config.watch import Signature, signature, watch_files
from tfunnel.gate.engine import HookEngine
from tfunnel.gate.manifest import HOOK_STATE_FILE, MANIFEST_FILE
from tfunnel.home.check import runtime as runtime_checks
from tfunnel.home.files import HomeReading, read_home
from tfunnel.home.listing import Listed, ListingCache
from tfunnel.home.live import Live
from tfunnel.home.rebuilds import Rebuilds
from tfunnel.home.reviewed import Reviewed
from tfunnel.home.state_key import KeyFile
from tfunnel.home.wrapped import Faces
from tfunnel.manage.builtins import Management, served_register
from tfunnel.manage.plans import Env
from tfunnel.observe.audit import CONFIG_FILE as LOG_CONFIG_FILE
from tfunnel.observe.audit import AuditLog
from tfunnel.observe.observer import Observer
from tfunnel.observe.telemetry import Telemetry
from tfunnel.observe.tokens import Counter
from tfunnel.proc.reaper import REAPER
from tfunnel.protocol.jsonrpc import Notification
from tfunnel.protocol.mrtr import Sealer
from tfunnel.route.channel import LegacyChannel
from tfunnel.route.methods import INSTRUCTIONS
from tfunnel.route.router import Router
from tfunnel.serve.stdio import StdioServer
from tfunnel.surface import profiles
from tfunnel.surface.changes import announced
from tfunnel.surface.instructions import Section, compose
from tfunnel.surface.notices import Notices
from tfunnel.surface.profiles import Chosen
from tfunnel.surface.reads import Reads
from tfunnel.surface.service import Surface
from tfunnel.tools.runner import LocalRunner
from tfunnel.upstream.factory import transport_for
from tfunnel.upstream.lifecycle import name_collision
from tfunnel.upstream.supervisor import Context, Identity, Supervisor
from tfunnel.upstream.transport import TransportFactory

log = structlog.get_logger("tfunnel.app")

EXIT_OK = 0
# Conventional shell status for death by a signal: 128 + the signal number.
EXIT_SIGINT = 128 + signal.SIGINT
EXIT_SIGTERM = 128 + signal.SIGTERM


# The files applied live (everything but toolfunnel.json, read at start only).
LIVE_FILES = (REGISTER_FILE, STATE_FILE, MANIFEST_FILE, HOOK_STATE_FILE, LOG_CONFIG_FILE, EXPOSE_FILE,
              APPROVALS_FILE)


@dataclass
class Gateway:
    home: Path
    live: Live
    audit: AuditLog
    gate: HookEngine
    supervisor: Supervisor
    surface: Surface
    router: Router
    approvals: Approvals
    faces: Faces
    # `auth/auth.config.json` as the start read it (read at start only; only `serve --http` uses it).
    auth: Reading[AuthConfig] | None = None
    # The live files' signatures from just before the start read them: the watcher begins from
    # these, so an edit that lands while the gateway starts is still applied.
    read_as: dict[Path, Signature] = field(default_factory=dict)
    rebuilds: Rebuilds | None = None  # run by `running` (without it, each change rebuilds at once)
    management: Management | None = None  # the tf_* runner (the admin UI runs its operations too)


def build(home: Path, environ: Mapping[str, str] | None = None, observer: Observer | None = None, *,
          profile: str | None = None, transports: TransportFactory = transport_for) -> Gateway:
    """Load and validate the home and wire the components; raise `ConfigError` naming every
    problem of every file that refuses a start (the same reading `tfunnel check` reports).
    `profile` (`serve --profile`) is every client's profile, whatever the profiles match;
    `transports` makes each upstream incarnation's transport (a test's doubles)."""
    read_as = {home / name: signature(home / name) for name in LIVE_FILES}
    start = read_home(home)
    start.refuse_start()
    # Logs the warnings, and a broken log config (the audit log is off).
    live = Live(home, start, served_register)
    _log_runtime_checks(start, child_environment(home, environ))
    settings = live.settings
    audit = AuditLog(home, live.log_config)
    env = child_environment(home, environ)
    # Log messages and resource updates for the clients that asked; what they ask goes upstream.
    notices = Notices(lambda upstream, uris: supervisor.set_subscriptions(upstream, uris),
                      lambda level: supervisor.set_log_level(level), lambda: live.state.passthrough)
    # Upstream changes reach the surface through one rebuild per burst (`home/rebuilds.py`).
    rebuilds = Rebuilds(_keeping_listing(home, live), settled=lambda: not supervisor.starting())
    supervisor = Supervisor(Context(home, env, settings.limits,
                                    Identity(settings.client_name, settings.client_version),
                                    rebuilds.request, partial(_upstream_notice, live, notices),
                                    lambda record: audit.record("mcp", **record),
                                    wrapped=lambda: live.state.passthrough, caught_up=rebuilds.caught_up),
                            transports=transports)
    live.on_collision = lambda *collided: audit.record("mcp", **name_collision(*collided))
    # What upstreams list reaches the surface through the tool approvals (pins and holds).
    approvals = Approvals(home, start.value(APPROVALS), live.files, audit,
                          quarantine=settings.approvals.quarantine, inspect=first_sight)
    reviewed = Reviewed(supervisor, approvals, partial(surface_names, live))
    live.ready_tools = reviewed.tools
    live.ready_lists = reviewed.lists
    live.holds = reviewed.holds
    # One bound on the processes of the whole gateway, tools and hooks alike.
    slots = trio.CapacityLimiter(settings.limits.max_tool_processes)
    gate = HookEngine(home, lambda: live.hooks, lambda: live.settings.gate.ask_fallback, audit, env,
                      observer, slots)
    runner = LocalRunner(home, settings.limits, environ, slots)
    # The management tools apply what they write at once (the watcher would, a poll later).
    appliers: dict[str, Callable[[], object]] = {}

    def apply(files: Iterable[str]) -> None:
        for file in files:
            if file in appliers:
                appliers[file]()
                read_as[home / file] = signature(home / file)  # applied: the watcher need not

    management = Management(Env(home, lambda: live.settings, lambda: live.catalog, supervisor.statistics,
                                supervisor.discover,
                                lambda uid, lists: approvals.preview(uid, lists, SURFACE_NAMES).lists),
                            audit, apply)
    # A call without a client (the CLI's) is asked nothing: an upstream's questions are declined.
    surface = Surface(lambda: live.catalog, lambda: gate, runner, supervisor, audit, observer,
                      default_channel=LegacyChannel({}, None, {}), builtins=management,
                      telemetry=Telemetry(Counter(settings.tokens)))
    reads = Reads(lambda: live.catalog, lambda: gate, supervisor, audit, notices)
    faces = Faces(live, supervisor, reviewed,
                  lambda chosen: server_instructions(supervisor, reviewed, live.settings, chosen))
    router = Router(lambda: live.settings, surface, gate, audit, reads=reads,
                    tools_changed=live.tools_changed, notices=notices, resources=lambda: live.catalog,
                    face=faces.face, settle=faces.settle, meet=faces.meet, waiting=faces.waiting,
                    choose=lambda who: profiles.choose(live.settings.profiles, who, profile),
                    sealer=_sealer(home, settings))
    gateway = Gateway(home, live, audit, gate, supervisor, surface, router, approvals, faces, start.get(AUTH),
                      read_as, rebuilds, management)
    approvals.on_write = lambda: read_as.__setitem__(home / APPROVALS_FILE, signature(home / APPROVALS_FILE))
    appliers.update(live_appliers(gateway))
    return gateway


def _sealer(home: Path, settings: Settings) -> Sealer | None:
    """The `requestState` sealer: with the key file instances share (`stateKeyFile`; a start is
    refused when it is unusable), else None (a random key of this process)."""
    if settings.state_key_file is None:
        return None
    return Sealer(keys=KeyFile.open(home, settings.state_key_file))


def _upstream_notice(live: Live, notices: Notices, upstream: str, note: Notification) -> None:
    """An upstream's notification: log messages and resource updates to who asked; the wrapped
    upstream's list_changed that changed nothing here to every client, as it came (a real change
    reaches them with the new surface)."""
    notices.upstream_notice(upstream, note)
    kind = announced(note.method)
    if kind is not None and upstream == live.state.passthrough:
        live.tools_changed.bump(kind)


def _keeping_listing(home: Path, live: Live) -> Callable[[], None]:
    """`live.upstreams_changed`, which also keeps the home's upstream tool listing for the command
    line (`home.listing`): each ready upstream's tools as listed now; an upstream that went down
    (or a gateway that stopped) keeps its last listing; one no longer configured leaves it."""
    cache = ListingCache(home)
    kept: dict[str, tuple[Listed, ...]] = {}

    def changed() -> None:
        live.upstreams_changed()
        ready = set(live.ready_tools())
        listed: dict[str, list[Listed]] = {}
        for tool in live.catalog.upstream:
            listed.setdefault(tool.upstream, []).append(Listed(tool.upstream, tool.tool, tool.surfaced,
                                                               tool.display))
        configured = [u.id for u in live.expose.upstreams]
        now = {uid: tuple(listed.get(uid, ())) if uid in ready else kept.get(uid, ())
               for uid in configured if uid in ready or uid in kept}
        if now != kept:
            kept.clear()
            kept.update(now)
            cache.write(tool for tools in now.values() for tool in tools)

    return changed


# The gateway's own names: no upstream item may pass itself off as one of these.
SURFACE_NAMES = {name: GATEWAY for name in META_TOOL_NAMES}


def surface_names(live: Live, upstream: str) -> dict[str, str]:
    """What a new item of `upstream` must not pass itself off as: the meta-tools, and the names
    that would take another upstream's surfaced name (`x` listing `y_z` surfaces as `x_y_z`, the
    name of `x_y`'s tool `z`). A register tool's name, or another upstream's bare tool name, is
    not at risk: upstream tools are surfaced as `<upstream>_<name>`."""
    names = dict(SURFACE_NAMES)
    prefix = f"{upstream}_"
    for tool in live.catalog.upstream:
        if tool.upstream != upstream and tool.surfaced.startswith(prefix):
            names.setdefault(tool.surfaced[len(prefix):], f"upstream {tool.upstream!r}")
    return names


def server_instructions(supervisor: Supervisor, reviewed: Reviewed, settings: Settings,
                        chosen: Chosen | None = None) -> str:
    """The instructions for a client starting now: the base text, then a section per ready
    upstream (its expose.json `description`, its own instructions as approved), in config order;
    only the upstreams the client's profile `chosen` allows."""
    shown = reviewed.instructions()
    sections = [Section(uid, upstream.spec.description, shown.get(uid, ""))
                for uid, upstream in supervisor.ready().items()
                if chosen is None or profiles.allows_upstream(chosen.profile, uid)]
    return compose(INSTRUCTIONS, sections, settings.upstream_instructions_max_chars)


def _log_runtime_checks(start: HomeReading, env: Mapping[str, str]) -> None:
    """Log what `tfunnel check` reports beyond the files: the parts that will fail, who wins a name.
    Advice only: a failure of the checks themselves never refuses a start."""
    try:
        findings = list(runtime_checks(start, env))
    except Exception:
        log.exception("the config checks failed; serving without them")
        return
    for finding in findings:
        report = log.error if finding.severity == "error" else log.warning
        report("config check", problem=str(finding))


def live_appliers(gateway: Gateway) -> dict[str, Callable[[], object]]:
    """Every file that is applied live (by its name in the home), and what re-reads and applies it."""
    live, audit = gateway.live, gateway.audit

    def reload_expose() -> object:
        expose = live.reload_expose()
        if expose is not None:
            gateway.supervisor.reconfigure(expose)
        return expose

    def reload_log_config() -> object:
        config = live.reload_log_config()
        if config is not None:
            audit.apply(config)
        return config

    def reload_state() -> object:
        before = live.state.passthrough
        applied = live.reload_state()
        if live.state.passthrough != before:
            gateway.supervisor.rewrapped(before, live.state.passthrough)
        return applied

    def reload_approvals() -> object:
        changed = gateway.approvals.reload()
        if changed:  # accepted (or edited) outside: every upstream is reviewed again
            live.upstreams_changed()
        return changed

    # Each callback re-reads its file by the one rule (`LiveFiles.reread`).
    return {
        APPROVALS_FILE: reload_approvals,
        REGISTER_FILE: live.reload_register,
        STATE_FILE: reload_state,
        MANIFEST_FILE: live.reload_hook_manifest,
        HOOK_STATE_FILE: live.reload_hook_state,
        LOG_CONFIG_FILE: reload_log_config,
        EXPOSE_FILE: reload_expose,
    }


def watched_files(gateway: Gateway) -> dict[Path, Callable[[], object]]:
    """Every file that is applied live, and what to do when it changes (re-read and apply it, and
    audit the reload). The watcher also calls it when the file is removed, and SIGHUP calls all."""
    audit = gateway.audit

    def changed(file: str, apply: Callable[[], object]) -> Callable[[], object]:
        def on_change() -> object:
            applied = apply()
            # Changed outside this gateway (an editor, the CLI): `via` says the file was read.
            audit.record("config", file=file, via="file", applied=applied not in (False, None))
            return applied
        return on_change

    return {gateway.home / file: changed(file, apply) for file, apply in live_appliers(gateway).items()}


@asynccontextmanager
async def reaping() -> AsyncIterator[None]:
    """For a gateway process (never inside another program: it adopts the process's orphans):
    become the subreaper of what we start, sweep orphans of ended runs while serving, and once
    everything stopped, sweep until none is left (`tfunnel.proc.reaper`)."""
    REAPER.activate()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(REAPER.serve)
            yield
            nursery.cancel_scope.cancel()
    finally:
        await REAPER.final_sweep()


@asynccontextmanager
async def running(gateway: Gateway, only: Collection[str] | None = None) -> AsyncIterator[trio.Nursery]:
    """The gateway's background parts (supervisor, file watcher) around a transport; cancelling
    the yielded nursery's scope shuts everything down, every child reaped. `only` names the
    upstreams to start (default: every enabled one)."""
    try:
        async with trio.open_nursery() as nursery:
            if gateway.rebuilds is not None:
                await nursery.start(gateway.rebuilds.run)
            await nursery.start(_start_upstreams, gateway, only)
            nursery.start_soon(partial(watch_files, watched_files(gateway), seen=gateway.read_as))
            await nursery.start(gateway.router.modern.parking.run)
            yield nursery
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):  # the http hooks' connections, once nothing calls
            await gateway.gate.aclose()


async def _start_upstreams(gateway: Gateway, only: Collection[str] | None, *,
                           task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Start the upstreams; report started once each is known to the supervisor (a call to one
    of their tools then waits for its upstream); `live.started` once each had its first attempt."""
    config = gateway.live.expose
    if only is not None:
        config = replace(config, upstreams=tuple(u for u in config.upstreams if u.id in only))
    async with trio.open_nursery() as nursery:
        await nursery.start(gateway.supervisor.serve, config)
        task_status.started()
        await gateway.supervisor.first_attempts()
        if gateway.rebuilds is not None:
            await gateway.rebuilds.caught_up()  # what those attempts brought is in the surface
        gateway.live.started.set()
        log.info("upstreams started", status=upstream_status(gateway))


class Signals:
    """SIGHUP reloads every live file; SIGINT/SIGTERM stop once (exit 130/143). The hooks let a
    transport add what it needs (systemd notifications, a drain) without its own handler."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway
        self.exit_code = EXIT_OK
        self.on_reload_start: Callable[[], None] = lambda: None
        self.on_reload_done: Callable[[], None] = lambda: None
        self.on_stop: Callable[[], None] = lambda: None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as received:
            task_status.started()
            async for signum in received:
                if self.deliver(signum):
                    return

    def deliver(self, signum: int) -> bool:
        """Act on one signal as its handler does; True once it stopped the gateway (the in-process
        test harness calls this where a process would get the signal)."""
        if signum == signal.SIGHUP:
            log.info("SIGHUP: reloading the config")
            self.on_reload_start()
            for reload in watched_files(self._gateway).values():
                reload()
            self.on_reload_done()
            return False
        log.info("signal received; shutting down", signal=signal.Signals(signum).name)
        self.exit_code = EXIT_SIGINT if signum == signal.SIGINT else EXIT_SIGTERM
        # Whoever signals may SIGKILL us soon (an MCP client does after 2 s): children
        # must be gone before that, or they would outlive the gateway.
        self._gateway.supervisor.hurry()
        self.on_stop()
        return True


async def run_stdio(gateway: Gateway) -> int:
    """Serve MCP on stdin/stdout until stdin closes (0) or SIGINT/SIGTERM (130/143)."""
    # Protocol gets private duplicates of fds 0/1; fd 1 then points at stderr so that nothing
    # else (a stray print, a library) can ever write into the protocol stream.
    stdin = trio.lowlevel.FdStream(os.dup(0))
    stdout = trio.lowlevel.FdStream(os.dup(1))
    os.dup2(2, 1)
    signals = Signals(gateway)
    async with reaping():
        await serve_stdio(gateway, stdin, stdout, signals)
    return signals.exit_code


async def serve_stdio(gateway: Gateway, stdin: trio.abc.ReceiveStream, stdout: trio.abc.SendStream,
                      signals: Signals, *, listen: bool = True) -> None:
    """The stdio gateway on a pair of byte streams, until `stdin` ends or a signal stops it
    (`signals`: with `listen`, the process's own signals; the test harness delivers them itself)."""
    live = gateway.live
    limits = live.settings.limits
    gateway.faces.mirroring = True  # one client: under a wrap, presented upstream as itself
    if live.state.passthrough is not None:  # ... from its first handshake on
        gateway.supervisor.expect_client(live.state.passthrough)
    server = StdioServer(gateway.router, live.tools_changed,
                         max_message_bytes=limits.max_message_bytes, grace_s=limits.shutdown_grace_s,
                         serve_legacy=lambda: live.settings.serve_legacy)
    async with running(gateway) as nursery:
        signals.on_stop = nursery.cancel_scope.cancel
        if listen:
            await nursery.start(signals.run)
        log.info("ready", server=live.settings.server_name, version=live.settings.server_version,
                 pid=os.getpid(), tools=len(live.register.tools), upstreams=len(live.expose.upstreams))
        async with stdin, stdout:
            await server.serve(stdin, stdout)
        # The client closed our stdin: it escalates to SIGTERM and SIGKILL within its own short
        # grace (the SDK: 2 s, then 2 s), and a SIGKILL would leave our upstreams (in sessions of
        # their own) running. So they stop as at a signal: stdin closed, SIGTERM, SIGKILL soon after.
        gateway.supervisor.hurry()


def upstream_status(gateway: Gateway) -> str:
    """One line for systemd's STATUS=: how many upstreams are ready."""
    stats = gateway.supervisor.statistics()
    ready = sum(1 for s in stats if s.state == "ready")
    return f"serving; upstreams ready {ready}/{len(stats)}"
