"""The `tfunnel` command line. Exit codes: 0 ok, 1 startup or config failure (or a tool call
that failed), 2 usage error, 130/143 after SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog
import trio

from tfunnel import __version__, completion
from tfunnel import log as logsetup
from tfunnel.app import build, reaping, run_stdio, running
from tfunnel.app_http import BindRefused, run_http
from tfunnel.config.atomic import sweep_temp_files
from tfunnel.config.home import HomeNotUsable, ResolvedHome, Seeding, resolve_home, seed_dir, seed_home
from tfunnel.config.load import load_settings
from tfunnel.config.model import META_TOOL_NAMES
from tfunnel.config.names import owners
from tfunnel.errors import ConfigError, ProtocolError
from tfunnel.home import requires
from tfunnel.home.check import check_home
from tfunnel.home.live import Live
from tfunnel.manage import list_cmd, ops_cmd, tokens_cmd
from tfunnel.manage.approvals_cmd import approvals_command
from tfunnel.manage.hook_cmd import hook_command
from tfunnel.manage.log_cmd import log_command
from tfunnel.manage.mcp_cmd import AddOptions, add_mcp_arguments, mcp_command, split_argv
from tfunnel.manage.ops_tools import VISIBILITY_ACTIONS
from tfunnel.manage.pack import PackOptions, pack_command
from tfunnel.manage.pack_plan import FORMATS
from tfunnel.manage.state_key_cmd import state_key_command
from tfunnel.manage.tool_cmd import tools_command, visibility_command
from tfunnel.manage.wrap_cmd import add_wrap_arguments, wrap_command
from tfunnel.protocol.session import INSTANCE_NAME
from tfunnel.surface import meta
from tfunnel.surface.context import CallContext
from tfunnel.upstream.supervisor import UpstreamStatistics

log = structlog.get_logger("tfunnel.cli")

def _global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    # Sub-parsers repeat the global options with SUPPRESS defaults so that an option given
    # after the subcommand does not get reset by the sub-parser's default.
    default = None if top else argparse.SUPPRESS
    parser.add_argument("--home", "--config-dir", dest="home", metavar="DIR", default=default,
                        help="the config home (else TFUNNEL_HOME, TOOLFUNNEL_HOME, ~/.config/tfunnel)")
    parser.add_argument("--log-format", choices=("json", "console"), default=default)
    parser.add_argument("--log-level", choices=logsetup.LEVELS, default="info" if top else default)


def common(parser: argparse.ArgumentParser) -> None:
    """The global options again, on a sub-parser."""
    _global_options(parser, top=False)


def _port(text: str) -> int:
    """`--port`: an integer 0..65535 (0 = any free port); else a usage error naming the range."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to 65535 (0 = any free port), "
                                         f"got {text!r}")
    return port


def _instance(text: str) -> str:
    """`--instance`: what a proxy's rule can match in a session id; else a usage error."""
    if not INSTANCE_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"must be 1 to 32 of A-Z a-z 0-9 _ -, got {text!r}")
    return text


def _grace(text: str) -> float:
    """`--grace`: a finite number of seconds >= 0; else a usage error (nan and inf included)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not (math.isfinite(seconds) and seconds >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text!r}")
    return seconds


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tfunnel", description="An MCP gateway: register tools behind "
                                "four meta-tools, gated by policy hooks.")
    p.add_argument("--version", action="version", version=f"tfunnel {__version__}")
    _global_options(p, top=True)
    sub = p.add_subparsers(dest="command")
    commands = {
        "serve": "serve MCP on stdin/stdout (what desktop clients spawn; the default)",
        "check": "validate the whole home; print every problem; exit 1 if any",
        "call": "run a tool through the gate and print its result",
        "tools": "list tools with their visibility",
        "tool": "change a tool's visibility; add, update or remove a register tool",
        "expose": "put an upstream tool on the top level, or take it off",
        "hook": "list hooks, add one, or enable, disable or remove one",
        "log": "turn the audit log on or off, show its status, or print its last records",
        "mcp": "list, add, enable, disable or remove upstream MCP servers, or reconnect one",
        "pack": "write a portable copy of the home, or a pip-installable project that serves it",
        "settings": "show the gateway settings, or set some (they apply after a restart)",
        "approvals": "list, diff or accept upstream descriptors held for approval (pinning)",
        "wrap": "show the wrap, make one upstream the whole surface (wrap ID), or clear it (--off)",
        "state-key": "rotate the requestState key that instances behind one proxy share (stateKeyFile)",
        "ui": "serve the admin web UI alone on loopback (it edits the home; gateways apply it live)",
        "completion": "print a shell completion script (bash or zsh)",
    }
    subs = {name: sub.add_parser(name, help=text, description=text) for name, text in commands.items()}
    for s in subs.values():
        common(s)
    subs["serve"].add_argument("--http", action="store_true", help="serve Streamable HTTP instead of stdio")
    subs["serve"].add_argument("--profile", metavar="NAME", default=None,
                               help="stdio: serve every client as this toolfunnel.json profile")
    subs["serve"].add_argument("--host", default="127.0.0.1",
                               help="HTTP bind address: one in 127.0.0.0/8, ::1 or localhost "
                               "(default 127.0.0.1)")
    subs["serve"].add_argument("--port", type=_port, default=None,
                               help="HTTP port (default: httpPort of toolfunnel.json, 9998; 0 = any)")
    subs["serve"].add_argument("--grace", type=_grace, default=10.0,
                               help="seconds in-flight HTTP calls get to finish at SIGTERM (default 10)")
    subs["serve"].add_argument("--instance", metavar="NAME", type=_instance, default=None,
                               help="with --http behind a proxy: this instance's name, which starts every "
                               "session id it mints (conf/nginx/tfunnel.conf routes on it)")
    subs["serve"].add_argument("--ui", action="store_true",
                               help="with --http: serve the admin web UI beside it, on loopback")
    subs["serve"].add_argument("--ui-host", default="127.0.0.1",
                               help="the admin UI's bind address: loopback only (default 127.0.0.1)")
    subs["serve"].add_argument("--ui-port", type=_port, default=None,
                               help="the admin UI's port (default: uiPort of toolfunnel.json, 9777; 0 = any)")
    subs["ui"].add_argument("--host", default="127.0.0.1",
                            help="bind address: loopback only (127.0.0.0/8, ::1, localhost; "
                            "default 127.0.0.1)")
    subs["ui"].add_argument("--port", type=_port, default=None,
                            help="port (default: uiPort of toolfunnel.json, 9777; 0 = any)")
    subs["call"].add_argument("name", help="a tool id or name, or a meta-tool")
    subs["call"].add_argument("args", nargs="?", default="{}", help="arguments as a JSON object")
    ops_cmd.add_tool_arguments(subs["tool"], common, tuple(VISIBILITY_ACTIONS))
    ops_cmd.add_expose_arguments(subs["expose"], common)
    add_mcp_arguments(subs["mcp"], common)
    hook_actions = subs["hook"].add_subparsers(dest="action", metavar="ACTION")
    hook_actions.required = True
    for action in ("list", "enable", "disable", "remove"):
        text = "list hooks" if action == "list" else f"{action} a hook"
        hook = hook_actions.add_parser(action, help=text, description=text)
        common(hook)
        if action != "list":
            hook.add_argument("id", nargs="?", help="the hook's id")
        else:
            _listing_json(hook)
    ops_cmd.add_hook_add_arguments(hook_actions, common)
    subs["hook"].set_defaults(id=None)
    ops_cmd.add_settings_arguments(subs["settings"], common)
    _approvals_arguments(subs["approvals"])
    add_wrap_arguments(subs["wrap"])
    subs["completion"].add_argument("shell", choices=("bash", "zsh"))
    subs["state-key"].add_argument("action", choices=("rotate",))
    subs["log"].add_argument("action", choices=("on", "off", "status", "tail"))
    subs["log"].add_argument("-n", "--lines", type=int, default=20, help="records for tail (default 20)")
    _listing_json(subs["tools"])
    subs["tools"].add_argument("--tokens", action="store_true",
                               help="tokens of each top-level definition, and of tools/list lean vs full")
    _listing_json(subs["log"])
    _pack_arguments(subs["pack"])
    return p


def _pack_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=FORMATS, default="home",
                   help="home: a copy of the home; python: a pip-installable project serving it")
    p.add_argument("--out", metavar="DIR", help="the folder to write (default <home>/dist/<name>)")
    p.add_argument("--name", help="the package name (default: serverName of toolfunnel.json, else my-mcp)")
    p.add_argument("--version", dest="pack_version", metavar="V",
                   help="the version (default: serverVersion, else 0.1.0; PEP 440 for python)")
    p.add_argument("--description", help="the python project's one-line description")
    p.add_argument("--approvals", action="store_true", help="include mcp/tool-approvals.json")
    p.add_argument("--force", action="store_true", help="write into a non-empty --out (its other files stay)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def _approvals_arguments(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    texts = {"list": "each upstream's pinned identity and what it holds",
             "diff": "what changed in held items (approved vs held)",
             "accept": "approve held items as they were held"}
    for action, text in texts.items():
        sub = actions.add_parser(action, help=text, description=text)
        common(sub)
        if action != "list":
            sub.add_argument("target", nargs="?", metavar="UPSTREAM[/ITEM]",
                             help="an upstream, or one of its items (a tool name; prompt:NAME, "
                                  "template:URI, instructions)")
        if action == "accept":
            sub.add_argument("--all", dest="every", action="store_true", help="accept everything held")
        sub.add_argument("--json", dest="approvals_json", action="store_true", help="print JSON")


def _listing_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", dest="listing_json", action="store_true",
                        help="print the listing as JSON (the in-band tf_list's result)")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # `tfunnel call ... | head`: the reader left; that is not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `tfunnel mcp add ID -- CMD ARGS...`: the upstream's own command line is not ours to parse.
    head, upstream_command = split_argv(argv)
    args = parser().parse_args(head)
    if upstream_command and args.command != "mcp":
        args, upstream_command = parser().parse_args(argv), []
    if args.command == "completion":  # no home: it is not read, and must not be seeded
        print(completion.script(parser(), args.shell), end="")
        return 0
    logsetup.configure(args.log_format, args.log_level)
    home = _prepare_home(args.home)
    command = args.command or "serve"
    try:
        if command == "serve":
            if getattr(args, "http", False):
                if args.profile is not None:
                    parser().error("--profile is for stdio; over HTTP a profile is chosen by its `match`")
                ui = (args.ui_host, args.ui_port) if args.ui else None
                return _serve_http(home, args.host, args.port, args.grace, ui, args.instance)
            if getattr(args, "ui", False):
                parser().error("--ui goes with --http; beside a stdio gateway run `tfunnel ui`")
            if getattr(args, "instance", None) is not None:
                parser().error("--instance goes with --http (it names the sessions a proxy routes)")
            return _serve(home, getattr(args, "profile", None))
        if command == "ui":
            return _ui(home, args.host, args.port)
        if command == "check":
            return _check(home)
        if command == "state-key":
            return state_key_command(home.path, args.action)
        if command == "call":
            return _call(home, args.name, args.args)
        if getattr(args, "listing_json", False) and not getattr(args, "probe", False):
            if command == "log" and args.action != "status":
                parser().error("--json goes with `tfunnel log status`")
            kind = {"tools": "tools", "hook": "hooks", "mcp": "mcps", "log": "log"}[command]
            return list_cmd.print_listing(home.path, kind)
        if command == "tools":
            return tokens_cmd.print_tokens(home.path) if args.tokens else tools_command(home.path)
        if command == "hook" and args.action == "add":
            return ops_cmd.hook_add_command(home.path, args)
        if command == "hook":
            if args.action != "list" and not args.id:
                parser().error(f"hook {args.action} needs a hook id")
            return hook_command(home.path, args.action, args.id)
        if command == "log":
            return log_command(home.path, args.action, lines=args.lines)
        if command == "pack":
            return pack_command(home.path, PackOptions(
                format=args.format, name=args.name, version=args.pack_version, description=args.description,
                out=args.out, force=args.force, approvals=args.approvals), as_json=args.json)
        if command == "mcp" and args.probe:
            return _probe(home)
        if command == "mcp":
            return mcp_command(home.path, args.action, args.id, upstream_command, AddOptions.from_args(args))
        if command == "expose":
            return ops_cmd.expose_command(home.path, args)
        if command == "settings":
            return ops_cmd.settings_command(home.path, args)
        if command == "wrap":
            return wrap_command(home.path, args.id, args.as_name, args.off)
        if command == "approvals":
            return approvals_command(home.path, args.action, getattr(args, "target", None),
                                     every=getattr(args, "every", False), as_json=args.approvals_json)
        if args.action in VISIBILITY_ACTIONS:
            return visibility_command(home.path, args)
        return ops_cmd.tool_command(home.path, args)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"tfunnel: {problem}", file=sys.stderr)
        print(f"tfunnel: refusing to start: {home.path} has {len(exc.problems)} config problem(s)",
              file=sys.stderr)
        return 1


def _prepare_home(cli_home: str | None) -> ResolvedHome:
    home = resolve_home(cli_home, os.environ)
    try:
        seeding = seed_home(home.path, seed_dir())
    except HomeNotUsable as exc:
        print(f"tfunnel: refusing to start: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    swept = sweep_temp_files(home.path)
    for line in seeding_lines(home.path, home.source, seeding):
        print(line, file=sys.stderr)
    for tmp in swept:
        log.warning("removed a temp file left by an interrupted write", path=str(tmp))
    _check_requires(home)
    return home


def seeding_lines(path: Path, source: str, seeding: Seeding) -> list[str]:
    """What every start says on stderr of the home it uses and what seeding did to it."""
    state = "seeded from the bundled defaults" if seeding.fresh else "existing"
    lines = [f"tfunnel: config home {path} ({state}; from {source})"]
    if not seeding.fresh:  # a fresh home's one line says it all; a completed one names each file
        lines += [f"tfunnel: seeded {rel} from the bundled defaults" for rel in seeding.files]
    return lines + [f"tfunnel: warning: {why}" for why in seeding.refused]


def _check_requires(home: ResolvedHome) -> None:
    """The home's `requires` entries, advisory: one stderr line per unmet one, never fatal (an
    invalid toolfunnel.json is the command's to report)."""
    try:
        entries = load_settings(home.path).requires
    except ConfigError:
        return
    for line in requires.unmet(entries, os.environ.get("PATH")):
        print(f"tfunnel: warning: {line}", file=sys.stderr)


def _serve(home: ResolvedHome, profile: str | None = None) -> int:
    gateway = build(home.path, profile=profile)
    defined = [p.name for p in gateway.live.settings.profiles]
    if profile is not None and profile not in defined:
        print(f"tfunnel: --profile {profile!r} names no profile in toolfunnel.json `profiles`; "
              f"defined: {', '.join(defined) or 'none'}", file=sys.stderr)
        return 2
    return trio.run(run_stdio, gateway)


def _ui(home: ResolvedHome, host: str, port: int | None) -> int:
    from tfunnel.ui.server import UiBindRefused, run_standalone

    try:
        return trio.run(run_standalone, home.path, host, port)
    except UiBindRefused as exc:
        print(f"tfunnel: {exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:
        return _listen_failed(group, host, port)


def _serve_http(home: ResolvedHome, host: str, port: int | None, grace: float,
                ui: tuple[str, int | None] | None = None, instance: str | None = None) -> int:
    from tfunnel.serve.metrics import Metrics  # only the HTTP service pays for prometheus_client

    if ui is not None:
        from tfunnel.ui.server import UiBindRefused, check_bind
        try:
            check_bind(ui[0])  # before anything starts
        except UiBindRefused as exc:
            print(f"tfunnel: {exc}", file=sys.stderr)
            return 1
    metrics = Metrics()
    gateway = build(home.path, observer=metrics)
    port = gateway.live.settings.http_port if port is None else port
    ui_bind = None if ui is None else (ui[0], gateway.live.settings.ui_port if ui[1] is None else ui[1])
    try:
        return trio.run(run_http, gateway, metrics, host, port, grace, ui_bind, instance)
    except BindRefused as exc:
        print(f"tfunnel: {exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:  # the listener fails inside the server's nursery
        return _listen_failed(group, host, port)


def _listen_failed(group: BaseExceptionGroup[BaseException], host: str, port: int | None) -> int:
    """A listener that could not bind (an OSError inside the server's nursery): say so, exit 1."""
    from tfunnel.ui.server import UiBindRefused

    ui, _ = group.split(UiBindRefused)
    if ui is not None:  # the admin UI's own listener: it says which
        print(f"tfunnel: {_leaf(ui)}", file=sys.stderr)
        return 1
    failed, _ = group.split(OSError)
    if failed is None:
        raise group
    error = _leaf(failed)
    where = f"{host}:{port}" if port is not None else host
    print(f"tfunnel: cannot listen on {where}: {getattr(error, 'strerror', None) or error}", file=sys.stderr)
    return 1


def _leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first exception inside (possibly nested) groups."""
    first = group.exceptions[0]
    return _leaf(first) if isinstance(first, BaseExceptionGroup) else first


def _check(home: ResolvedHome) -> int:
    found = check_home(home.path)
    warnings = sum(1 for p in found if p.severity == "warning")
    for problem in found:
        print(f"{problem.severity}: {problem}" if problem.severity != "error" else problem)
    found = [p for p in found if p.severity != "note"]  # a note is for knowing: it fails nothing
    if found:  # a warning fails the check too (SPEC §2): an unknown field is usually a typo
        print(f"{len(found) - warnings} problem(s) and {warnings} warning(s) in {home.path}")
        return 1
    print(f"ok: {home.path}")
    return 0


def _call(home: ResolvedHome, name: str, raw_args: str) -> int:
    try:
        call_args = json.loads(raw_args)
    except ValueError as exc:
        print(f"tfunnel call: ARGS must be a JSON object: {exc}", file=sys.stderr)
        return 2
    if not isinstance(call_args, dict):
        print("tfunnel call: ARGS must be a JSON object", file=sys.stderr)
        return 2
    gateway = build(home.path)

    async def run() -> Any:
        # Only the upstreams this call may need are started (none for a local tool); the
        # surface waits for the one that owns the tool.
        needed = needed_upstreams(gateway.live, name, call_args)
        async with reaping(), running(gateway, needed):
            if needed is None:  # a listing of every tool: let every upstream have its start
                await gateway.live.started.wait()
            return await gateway.surface.run_named(name, call_args, CallContext(session_id="cli"))

    try:
        result = trio.run(run)
    except ProtocolError as exc:
        print(f"tfunnel call: {exc.message}", file=sys.stderr)
        return 1
    if result.structured is not None:
        print(json.dumps(result.structured, indent=2, ensure_ascii=False))
    else:
        for block in result.content:
            print(block.get("text", json.dumps(block)))
    return 1 if result.is_error else 0


def needed_upstreams(live: Live, name: str, args: dict[str, Any]) -> set[str] | None:
    """The upstreams `tfunnel call NAME ARGS` may need: none for a local tool or a guide, the
    owners of an upstream tool's name, every one (None) for a listing."""
    if name == meta.LIST_TOOLS:
        return None
    if name in (meta.RUN_TOOL, meta.TOOL_INSTRUCTIONS):
        target = args.get("name")
        if not isinstance(target, str):
            return set()  # the call fails its argument check
        name = target
    elif name in META_TOOL_NAMES:
        return set()
    if live.catalog.find_local(name) is not None:
        return set()
    return set(owners(name, (u.id for u in live.expose.upstreams if u.enabled), live.expose.expose))


def _probe(home: ResolvedHome) -> int:
    """`tfunnel mcp list --probe`: connect every enabled upstream once and show its live state."""
    gateway = build(home.path)

    async def probe() -> list[UpstreamStatistics]:
        async with reaping(), running(gateway):
            await gateway.live.started.wait()
            return gateway.supervisor.statistics()

    rows = trio.run(probe)
    for row in rows:
        detail = row.stopped_reason or row.last_error or ""
        print(f"{row.id}  {row.state}  tools={row.tools}  protocol={row.protocol_version or '-'}  "
              f"restarts={row.restarts}" + (f"  {detail}" if row.state != "ready" and detail else ""))
    if not rows:
        print(f"no upstreams in {home.path / 'mcp' / 'expose.json'}")
    return 0 if all(r.state in ("ready", "disabled") for r in rows) else 1
