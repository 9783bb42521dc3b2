"""`tfunnel mcp list|add|enable|disable|remove|reconnect`: change upstreams without a running gateway.

Works on `mcp/expose.json` only; a running gateway reloads it live. Every change validates the whole
resulting document (`parse_expose`, the same rules and messages as loading) before one atomic write,
keeps unknown fields and the order of entries, and records an audit `config` record (via "cli").
A missing file is created as `{"version": 1, "upstreams": [], "expose": []}` by the first change.

`enable`, `disable`, `remove` and `reconnect` are `tf_mcp_set`'s operation (`ops_mcp.mcp_set`, the
one the in-band tool and the admin UI run); `add` is this command's own (it takes a command line
and warns of what the gateway would refuse to start).
`remove` cascades: the upstream's expose entries go with it; `disable` and `remove` of the wrapped
upstream (`tfunnel wrap`) clear the wrap in `tools/tools.state.json` in the same change.
`reconnect` stamps `reconnectAt` with the current UTC time; a running gateway restarts an upstream
whose definition changed, including a `stopped` one. `add` prints isolation-guard problems (and a
cwd that is not a folder) as warnings: adding is allowed, the gateway refuses to start the
upstream until the problem is fixed.

Exit status: 0 on success, 1 when the file is malformed (its problems go to stderr and it is left
as it is), the id is unknown, or the change would make the file invalid; 2 for a usage error.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tfunnel.config.atomic import write_json_atomic
from tfunnel.config.expose import (
    EXPOSE_FILE,
    ExposeConfig,
    UpstreamSpec,
    empty_document,
    parse_expose,
)
from tfunnel.config.home import child_environment
from tfunnel.config.validate import read_json
from tfunnel.errors import ConfigError, ConfigProblem, ToolFailure
from tfunnel.home import preflight
from tfunnel.manage import ops_mcp
from tfunnel.manage.edit import commit
from tfunnel.manage.ops_wrap import cleared_for
from tfunnel.manage.plans import Env
from tfunnel.observe.audit import AuditLog
from tfunnel.upstream.isolation import isolation_problems
from tfunnel.upstream.remote import display_url

ACTIONS = ("list", "add", "enable", "disable", "remove", "reconnect")
_PREFIX = "tfunnel mcp:"


@dataclass(frozen=True)
class AddOptions:
    """The upstream fields `tfunnel mcp add` takes as flags (None / False: the field is left out)."""

    env: list[str] = field(default_factory=list)  # KEY=VALUE
    cwd: str | None = None
    description: str = ""
    disabled: bool = False
    allow_outside_paths: bool = False
    allow_code_loading_env: bool = False
    timeout_ms: int | None = None
    request_timeout_ms: int | None = None
    # A remote upstream: its URL, its transport (default: from the URL's scheme), its headers
    # (KEY=VALUE; a value may refer to the gateway's environment as ${NAME}).
    url: str | None = None
    transport: str | None = None
    headers: list[str] = field(default_factory=list)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> AddOptions:
        return cls(env=args.env, cwd=args.cwd, description=args.description, disabled=args.disabled,
                   allow_outside_paths=args.allow_outside_paths,
                   allow_code_loading_env=args.allow_code_loading_env,
                   timeout_ms=args.timeout_ms, request_timeout_ms=args.request_timeout_ms,
                   url=args.url, transport=args.transport, headers=args.header)

    def local_only(self) -> list[str]:
        """The flags given that only a stdio upstream has."""
        return [flag for flag, given in (("--env", bool(self.env)), ("--cwd", self.cwd is not None),
                                         ("--allow-outside-paths", self.allow_outside_paths),
                                         ("--allow-code-loading-env", self.allow_code_loading_env))
                if given]


def mcp_command(home: Path, action: str, upstream_id: str | None, command: list[str],
                options: AddOptions | None = None) -> int:
    """Run one `tfunnel mcp` action against `home`; return the exit status."""
    options = options or AddOptions()
    usage = _usage_problem(action, upstream_id, command, options)
    if usage:
        print(f"{_PREFIX} {usage}", file=sys.stderr)
        return 2
    path = home / EXPOSE_FILE
    try:
        raw, config = _load(path)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"{_PREFIX} {problem}", file=sys.stderr)
        if action != "list":
            print(f"{_PREFIX} {EXPOSE_FILE} left unchanged; fix it first", file=sys.stderr)
        return 1
    if action == "list":
        _list(home, config, exists=path.exists())
        return 0
    assert upstream_id is not None  # _usage_problem checked it
    if action == "add":
        variables = _parse_pairs("--env", options.env)
        headers = _parse_pairs("--header", options.headers)
        if variables is None or headers is None:
            return 2
        return _add(home, raw, upstream_id, command, variables, headers, options)
    if config.upstream(upstream_id) is None:
        known = ", ".join(sorted(u.id for u in config.upstreams)) or "none"
        print(f"{_PREFIX} no upstream with id {upstream_id!r} (known: {known})", file=sys.stderr)
        return 1
    row = next(row for row in raw["upstreams"] if row.get("id") == upstream_id)
    if action in ("enable", "disable"):
        # Nothing to do (and no wrap of it to clear): the file and the audit log stay as they are.
        wrapped = action == "disable" and cleared_for(Env(home), upstream_id) is not None
        if row.get("enabled", True) is (action == "enable") and not wrapped:
            print(f"{upstream_id}: already {action}d")
            return 0
        done = f"{upstream_id}: {action}d"
    elif action == "remove":
        cascaded = sum(1 for item in raw.get("expose", []) if item.get("upstream") == upstream_id)
        done = f"{upstream_id}: removed (and {cascaded} expose entr{'y' if cascaded == 1 else 'ies'})"
    else:  # reconnect
        done = f"{upstream_id}: reconnect requested (a running gateway restarts it)"
        if row.get("enabled", True) is False:
            done += "; it is disabled, so it starts only once enabled"
    # tf_mcp_set's operation (the one the in-band tool and the admin UI run): disabling or
    # removing the wrapped upstream clears the wrap in the same change.
    try:
        plan = ops_mcp.mcp_set(Env(home), {"id": upstream_id, "action": action})
        if plan.change is not None:
            commit(home, plan.change, AuditLog(home), via="cli")
    except ToolFailure as exc:
        print(f"{_PREFIX} {exc}", file=sys.stderr)
        return 1
    print(done)
    if plan.result.get("wrapCleared"):
        print(f'wrap cleared (was "{upstream_id}")')
    return 0


def add_mcp_arguments(
    parser: argparse.ArgumentParser, common: Callable[[argparse.ArgumentParser], object] | None = None
) -> None:
    """Give the `tfunnel mcp` parser one sub-parser per action (`args.action`, `args.id`, and for add
    `env`, `cwd`, `description`, `disabled`). `common` adds the global options to each of them.

    The upstream's command is not parsed here: `split_argv` cuts it off at `--` beforehand.
    """
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    helps = {
        "list": "list upstreams and their expose entries",
        "add": "add an upstream: tfunnel mcp add ID [options] -- COMMAND [ARGS...] (stdio), or "
               "tfunnel mcp add ID --url URL [--header K=V] [--transport http|websocket] (remote)",
        "enable": "enable an upstream",
        "disable": "disable an upstream",
        "remove": "remove an upstream and its expose entries",
        "reconnect": "restart an upstream in a running gateway (also a stopped one)",
    }
    for action, text in helps.items():
        sub = actions.add_parser(action, help=text, description=text)
        if common is not None:
            common(sub)
        if action == "list":
            sub.add_argument("--probe", action="store_true",
                             help="start every enabled upstream, show its live state, stop them")
            sub.add_argument("--json", dest="listing_json", action="store_true",
                             help="print the upstreams and their expose entries as JSON (tf_list's result)")
        else:
            sub.add_argument("id", help="the upstream's id")
        if action == "add":
            sub.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                             help="an environment variable for the upstream (repeatable)")
            sub.add_argument("--cwd", help="its working directory (default: the home; relative to the home)")
            sub.add_argument("--description", default="", help="a note for people")
            sub.add_argument("--disabled", action="store_true", help="add it disabled")
            sub.add_argument("--allow-outside-paths", action="store_true",
                             help="let its args, cwd and path-list env variables point outside the home")
            sub.add_argument("--allow-code-loading-env", action="store_true",
                             help="let it have option-string env variables such as NODE_OPTIONS")
            sub.add_argument("--timeout-ms", type=_milliseconds, metavar="MS",
                             help="window for a tool call (default 120000)")
            sub.add_argument("--request-timeout-ms", type=_milliseconds, metavar="MS",
                             help="window for a control request such as tools/list (default 10000)")
            sub.add_argument("--url", help="a remote upstream's URL (http(s):// or ws(s)://), "
                                            "instead of a command")
            sub.add_argument("--transport", choices=("http", "websocket"),
                             help="a remote upstream's transport (default: from the URL's scheme)")
            sub.add_argument("--header", action="append", default=[], metavar="KEY=VALUE",
                             help="a header for a remote upstream (repeatable); ${NAME} in the value "
                                  "is read from the gateway's environment when it connects")
    parser.set_defaults(id=None, env=[], cwd=None, description="", disabled=False, probe=False,
                        allow_outside_paths=False, allow_code_loading_env=False, timeout_ms=None,
                        request_timeout_ms=None, url=None, transport=None, header=[])


def _milliseconds(text: str) -> int:
    """A positive whole number of milliseconds (argparse turns the error into a usage error)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number of milliseconds, got {text!r}")
    return value


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split `tfunnel ... mcp add ID [options] -- COMMAND ARGS...` at the first `--` after `mcp`.

    Returns (the arguments for argparse, the upstream's command line). Any other command line comes
    back whole with an empty command: argparse cannot take a positional list after optionals, and
    must never read the upstream's own options (`--home`, `--env`, ...) as ours.
    """
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    if "mcp" not in argv[:cut]:
        return argv, []
    return argv[:cut], argv[cut + 1:]


def _usage_problem(action: str, upstream_id: str | None, command: list[str],
                   options: AddOptions) -> str | None:
    if action not in ACTIONS:
        return f"unknown action {action!r}; expected one of {', '.join(ACTIONS)}"
    if action != "list" and not upstream_id:
        return f"mcp {action} needs an upstream id"
    remote = options.url is not None
    if action == "add" and remote and command:
        return f"mcp add takes a command or --url, not both (got --url and {shlex.join(command)})"
    if action == "add" and not remote and not command:
        return ("mcp add needs a command or a URL: tfunnel mcp add ID -- COMMAND [ARGS...], or "
                "tfunnel mcp add ID --url URL [--header K=V] [--transport http|websocket]")
    if action == "add" and remote and options.local_only():
        return f"{', '.join(options.local_only())} apply to a stdio upstream only, not with --url"
    if action == "add" and not remote and (options.headers or options.transport):
        return "--header and --transport apply to a remote upstream only (with --url)"
    if action != "add" and command:
        return f"mcp {action} takes no command (got {shlex.join(command)})"
    return None


def _load(path: Path) -> tuple[dict[str, Any], ExposeConfig]:
    """The raw document (for rewriting) and its validated config; raises `ConfigError`."""
    if not path.exists():
        return empty_document(), ExposeConfig()
    try:
        raw = read_json(path, EXPOSE_FILE)
    except ValueError as exc:
        raise ConfigError([ConfigProblem(EXPOSE_FILE, str(exc))]) from exc
    config = parse_expose(raw)  # also proves raw is an object whose rows are all objects
    assert isinstance(raw, dict)
    raw.setdefault("upstreams", [])
    return raw, config


def _parse_pairs(flag: str, pairs: list[str]) -> dict[str, str] | None:
    values: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            # Not echoed: what was typed may be a secret.
            print(f"{_PREFIX} {flag} wants KEY=VALUE; one of them has no '=' or no name", file=sys.stderr)
            return None
        values[name] = value
    return values


def _remote_transport(url: str, transport: str | None) -> str:
    """The transport of a remote upstream: as given, else from the URL's scheme (ws/wss:
    websocket, anything else: http; a mismatch is left to the config's own check)."""
    if transport is not None:
        return transport
    return "websocket" if url.lower().startswith(("ws://", "wss://")) else "http"


def _add(home: Path, raw: dict[str, Any], upstream_id: str, command: list[str],
         env: dict[str, str], headers: dict[str, str], options: AddOptions) -> int:
    row: dict[str, Any]
    if options.url is not None:
        row = {"id": upstream_id, "transport": _remote_transport(options.url, options.transport),
               "url": options.url}
        if headers:
            row["headers"] = headers
    else:
        row = {"id": upstream_id, "transport": "stdio", "command": command[0], "args": command[1:]}
    if env:
        row["env"] = env
    if options.cwd is not None:
        row["cwd"] = options.cwd
    if options.description:
        row["description"] = options.description
    for key, value in (("timeoutMs", options.timeout_ms), ("requestTimeoutMs", options.request_timeout_ms)):
        if value is not None:
            row[key] = value
    if options.allow_outside_paths:
        row["allowOutsidePaths"] = True
    if options.allow_code_loading_env:
        row["allowCodeLoadingEnv"] = True
    disabled = options.disabled
    row["enabled"] = not disabled
    raw["upstreams"].append(row)
    try:
        config = parse_expose(raw)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"{_PREFIX} {problem}", file=sys.stderr)
        print(f"{_PREFIX} {upstream_id!r} not added; {EXPOSE_FILE} left unchanged", file=sys.stderr)
        return 1
    spec = config.upstream(upstream_id)
    assert spec is not None
    refusals = isolation_problems(spec, home)
    # What `tfunnel check` would say about this row (isolation, cwd, command on PATH), as warnings:
    # the row is added all the same.
    lone = ExposeConfig(upstreams=(replace(spec, enabled=True),))
    warnings = preflight.upstream_findings(lone, home, child_environment(home)).errors
    for warning in warnings:
        text = warning.message if warning.field is None else f"{warning.field}: {warning.message}"
        print(f"{_PREFIX} warning: upstream {upstream_id!r}: {text}", file=sys.stderr)
    if refusals:
        print(f"{_PREFIX} warning: the isolation guard refuses {upstream_id!r}: the gateway stops it "
              "at once, without retrying; if that is intended, `tfunnel mcp remove "
              f"{upstream_id}` and add it again with --allow-outside-paths or --allow-code-loading-env",
              file=sys.stderr)
    elif warnings:
        print(f"{_PREFIX} warning: the gateway will not start {upstream_id!r} until this is fixed",
              file=sys.stderr)
    state = "disabled" if disabled else "enabled"
    return _commit(home, raw, "add", upstream_id, f"{upstream_id}: added ({state})", validated=True)


def _commit(home: Path, raw: dict[str, Any], action: str, upstream_id: str, done: str, *,
            validated: bool = False) -> int:
    """Validate the whole new document, write it atomically, audit the change, report it."""
    if not validated:
        try:
            parse_expose(raw)
        except ConfigError as exc:  # cannot happen for enable/disable/remove/reconnect; kept as a net
            for problem in exc.problems:
                print(f"{_PREFIX} {problem}", file=sys.stderr)
            print(f"{_PREFIX} {EXPOSE_FILE} left unchanged", file=sys.stderr)
            return 1
    write_json_atomic(home / EXPOSE_FILE, raw)
    AuditLog(home).record("config", file=EXPOSE_FILE, via="cli", change=f"{action} {upstream_id}")
    print(done)
    return 0


def _list(home: Path, config: ExposeConfig, *, exists: bool) -> None:
    for spec in config.upstreams:
        state = "enabled" if spec.enabled else "disabled"
        print(f"{spec.id}  {spec.transport}  {state}  {_target(spec)}")
        if spec.transport == "stdio":
            print(f"  cwd: {spec.resolved_cwd(home)}")
        if spec.description:
            print(f"  description: {spec.description}")
        for entry in config.expose:
            if entry.upstream == spec.id:
                flags = "" if entry.enabled else "  (disabled)"
                category = f"  [{entry.category}]" if entry.category else ""
                print(f"  expose: {entry.tool} as {entry.as_name}{category}{flags}")
        for problem in isolation_problems(spec, home):
            print(f"  isolation: {problem}")
    if not config.upstreams:
        note = "" if exists else " (the file does not exist yet)"
        print(f"no upstreams in {home / EXPOSE_FILE}{note}")


def _target(spec: UpstreamSpec) -> str:
    """The command line of a stdio upstream, the URL of a remote one (without credentials)."""
    if spec.transport == "stdio":
        return shlex.join([spec.command, *spec.args])
    return display_url(spec.url or "")
