"""`tfunnel tool add|update|remove`, `tfunnel expose add|remove`, `tfunnel hook add`, `tfunnel
settings [set K=V ...]`: the management operations (`manage.ops_*`) from the command line.

The same operation as the tf_* tool, with the same checks: the arguments (in the tool's JSON
shape) are validated against the tool's inputSchema (`manage.builtins`), planned on the home
(`Env`: its files, no live surface), then written by `manage.edit.commit` (via "cli"). Nothing
is asked: the CLI's user is the operator. A running gateway picks the files up through its
watcher and tells its clients (`list_changed`). Output: `manage.output`.

Exit status: 0 done, 1 refused (the operation's message on stderr; nothing written), 2 usage.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tfunnel.config.load import SCRIPTS_DIR, load_register, load_settings, load_state
from tfunnel.config.model import Settings
from tfunnel.errors import ConfigError, ToolFailure
from tfunnel.manage import ops_mcp, ops_settings
from tfunnel.manage.builtins import BUILTINS, add_management
from tfunnel.manage.edit import commit
from tfunnel.manage.output import fail, succeed
from tfunnel.manage.plans import Env, Plan
from tfunnel.observe.audit import AuditLog
from tfunnel.surface.catalog import Catalog
from tfunnel.surface.validation import validate_args

Op = Callable[[Env, Mapping[str, Any]], Plan]
Common = Callable[[argparse.ArgumentParser], object]
HOOK_EVENTS = ("PreToolUse", "PostToolUse", "SessionStart", "Stop", "UserPromptSubmit", "PreCompact")


def cli_env(home: Path) -> Env:
    """What an operation reads outside a gateway: the home's settings and its local tools."""

    def settings() -> Settings:
        try:
            return load_settings(home)
        except ConfigError:
            return Settings()

    def catalog() -> Catalog | None:
        try:
            return Catalog(load_register(home), load_state(home)[0])
        except ConfigError:
            return None

    return Env(home, settings, catalog)


def run_op(home: Path, tool: str, build: Callable[[], dict[str, Any]],
           headline: Callable[[dict[str, Any]], str], *, prefix: str, as_json: bool,
           op: Op | None = None) -> int:
    """Build the arguments, check them against `tool`'s schema, plan (`op`, else the tool's own
    operation) and commit; print the result or the refusal."""
    builtin = BUILTINS[tool]

    def plan_it() -> Plan:
        args = build()
        validate_args(builtin.name, builtin.input_schema, args)
        planner = op or builtin.plan
        assert planner is not None  # the tools these commands run are plans, not reads
        return planner(cli_env(home), args)
    return _commit(home, plan_it, headline, prefix=prefix, as_json=as_json)


def _commit(home: Path, plan_it: Callable[[], Plan], headline: Callable[[dict[str, Any]], str], *,
            prefix: str, as_json: bool) -> int:
    try:
        plan = plan_it()
        if plan.change is not None:
            commit(home, plan.change, AuditLog(home), via="cli")
    except ToolFailure as exc:
        return fail(prefix, str(exc), as_json=as_json)
    return succeed(plan.result, headline(plan.result), as_json=as_json)


# Argument types (a bad one is a usage error, exit 2).

def json_value(text: str) -> Any:
    """A value as JSON when it parses, else the text itself (`allow`, `Hello there`)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"must be JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def pair(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"wants KEY=VALUE, got {text!r}")
    return key, json_value(value)


def read_text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ToolFailure(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


# The parsers.

def add_tool_arguments(parser: argparse.ArgumentParser, common: Common, visibility: tuple[str, ...]) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    for action in visibility:
        sub = _sub(actions, action, f"{action} a tool (tools/tools.state.json)", common)
        sub.add_argument("id", help="the tool's surfaced name (a register id, a meta-tool, or an upstream "
                         "tool's name, checked by starting that upstream)")
        sub.add_argument("--force", action="store_true",
                         help="write an upstream tool's name without starting its upstream to check it")
    add = _sub(actions, "add", "add a register tool (tf_tool_add)", common)
    add.add_argument("id", help="the tool's id")
    add.add_argument("--name", required=True, help="its display name")
    add.add_argument("--summary")
    add.add_argument("--category")
    add.add_argument("--instructions")
    add.add_argument("--input-schema", type=json_object, metavar="JSON", help="its inputSchema")
    add.add_argument("--mode", choices=("gateway", "reference"))
    how = add.add_mutually_exclusive_group()
    how.add_argument("--script", metavar="PATH", help=f"invoke a script in {SCRIPTS_DIR}/")
    how.add_argument("--shell", metavar="CMD", help="invoke a shell command")
    add.add_argument("--script-file", metavar="FILE",
                     help=f"a local file whose text is written as the script (to {SCRIPTS_DIR}/, "
                     "under --script's name, else the file's)")
    add.add_argument("--timeout-s", type=float, metavar="S")
    update = _sub(actions, "update", "change a register tool's fields or script (tf_tool_update)", common)
    update.add_argument("id", help="the tool's id")
    update.add_argument("--set", type=pair, action="append", default=[], metavar="FIELD=JSON",
                        help="set a field (the value as JSON, else as a string; repeatable)")
    update.add_argument("--unset", action="append", default=[], metavar="FIELD", help="remove a field")
    update.add_argument("--script-file", metavar="FILE",
                        help="rewrite the tool's script with this file's text")
    remove = _sub(actions, "remove", "remove a register tool and its state (its script stays)", common)
    remove.add_argument("id", help="the tool's id")
    _sub(actions, "add-management", "add the management tools (tf_*) the register lacks", common)


def add_expose_arguments(parser: argparse.ArgumentParser, common: Common) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    add = _sub(actions, "add", "put an upstream tool on the top level (tf_expose)", common)
    remove = _sub(actions, "remove", "drop an expose entry (the tool gets its default name back)", common)
    prefix = _sub(actions, "name-prefix", "auto: git's git_status stays git_status; always: git_git_status "
                  "(hooks and state follow)", common)
    prefix.add_argument("mode", choices=("auto", "always"))
    for sub in (add, remove):
        sub.add_argument("upstream", help="the upstream's id")
        sub.add_argument("tool", help="the tool's name at the upstream")
    add.add_argument("--as", dest="as_name", metavar="NAME", help="the name to surface it as")
    add.add_argument("--category")
    add.add_argument("--disabled", action="store_true", help="write the entry disabled")


def add_hook_add_arguments(actions: Any, common: Common) -> None:
    add = _sub(actions, "add", "add a policy hook (tf_hook_add)", common)
    add.add_argument("id", help="the hook's id")
    add.add_argument("--event", required=True, help=f"one of {', '.join(HOOK_EVENTS)}")
    add.add_argument("--matcher", help="a regular expression over tool names (default: every tool)")
    how = add.add_mutually_exclusive_group(required=True)
    how.add_argument("--command", dest="hook_command", metavar="CMD", help="the command the hook runs")
    how.add_argument("--script-file", metavar="FILE", help="a local file written to hooks/scripts/")
    how.add_argument("--url", help="an http hook: the URL the payload is POSTed to (https, or http to "
                     "a loopback host)")
    add.add_argument("--script", metavar="NAME",
                     help="the script's name in hooks/scripts/ (default: the file's)")
    add.add_argument("--timeout", type=float, metavar="S")
    add.add_argument("--disabled", action="store_true", help="add it disabled")
    add.add_argument("--description")
    add.add_argument("--fail-closed", action="store_true", help="deny the call when the hook fails")
    add.add_argument("--header", action="append", metavar="NAME=VALUE", default=None,
                     help="an http hook's header (repeatable); $VAR in VALUE needs --allow-env VAR")
    add.add_argument("--allow-env", action="append", metavar="VAR", default=None,
                     help="an environment variable an http hook's headers may use (repeatable)")


def add_settings_arguments(parser: argparse.ArgumentParser, common: Common) -> None:
    json_option(parser)
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    _sub(actions, "show", "print the settings (the default)", common)
    change = _sub(actions, "set", "change settings (they apply after a restart)", common)
    change.add_argument("pairs", nargs="+", type=pair, metavar="KEY=VALUE",
                        help="e.g. httpPort=9000 gate.askFallback=allow (the value as JSON, else a string)")
    parser.set_defaults(action="show", pairs=[])


def json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print the result as JSON (with \"ok\")")


def _sub(actions: Any, name: str, text: str, common: Common) -> argparse.ArgumentParser:
    sub: argparse.ArgumentParser = actions.add_parser(name, help=text, description=text)
    common(sub)
    json_option(sub)
    return sub


# The commands.

def tool_command(home: Path, args: argparse.Namespace) -> int:
    as_json = getattr(args, "json", False)
    prefix = "tfunnel tool:"
    if args.action == "add-management":
        try:
            plan = add_management(cli_env(home), {})
            if plan.change is not None:
                commit(home, plan.change, AuditLog(home), via="cli")
        except ToolFailure as exc:
            return fail(prefix, str(exc), as_json=as_json)
        added = plan.result["added"]
        return succeed(plan.result, f"added {', '.join(added)}" if added else "nothing to add: the register "
                       "has every management tool", as_json=as_json)
    if args.action == "remove":
        return run_op(home, "tf_tool_set", lambda: {"id": args.id, "action": "remove"},
                      lambda r: f"{r['id']}: removed", prefix=prefix, as_json=as_json)
    if args.action == "add":
        return run_op(home, "tf_tool_add", lambda: _tool_add_args(args),
                      lambda r: f"{r['id']}: added", prefix=prefix, as_json=as_json)
    return run_op(home, "tf_tool_update", lambda: _tool_update_args(args),
                  lambda r: f"{r['id']}: updated", prefix=prefix, as_json=as_json)


def _tool_add_args(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"id": args.id, "name": args.name}
    for key, value in (("summary", args.summary), ("category", args.category),
                       ("instructions", args.instructions), ("inputSchema", args.input_schema),
                       ("mode", args.mode), ("timeoutS", args.timeout_s)):
        if value is not None:
            out[key] = value
    if args.shell is not None:
        out["invoke"] = {"type": "shell", "command": args.shell}
    elif args.script is not None or args.script_file is not None:
        path = args.script or f"{SCRIPTS_DIR}/{Path(args.script_file).name}"
        out["invoke"] = {"type": "script", "path": path}
    if args.script_file is not None:
        out["scriptText"] = read_text(args.script_file)
    return out


def _tool_update_args(args: argparse.Namespace) -> dict[str, Any]:
    patch: dict[str, Any] = dict(args.set)
    patch.update(dict.fromkeys(args.unset))
    out: dict[str, Any] = {"id": args.id}
    if patch or args.script_file is None:
        out["patch"] = patch
    if args.script_file is not None:
        out["scriptText"] = read_text(args.script_file)
    return out


def expose_command(home: Path, args: argparse.Namespace) -> int:
    as_json = getattr(args, "json", False)
    if args.action == "name-prefix":
        def headline(result: dict[str, Any]) -> str:
            text = f"namePrefix: {result['namePrefix']}" + ("" if result["changed"] else " (unchanged)")
            return text + "".join(f"\n{line}" for line in [*result.get("renamed", []),
                                                           *result.get("notices", [])])
        return _commit(home, lambda: ops_mcp.expose_name_prefix(cli_env(home), {"namePrefix": args.mode}),
                       headline, prefix="tfunnel expose:", as_json=as_json)
    target = {"upstream": args.upstream, "tool": args.tool}
    if args.action == "remove":
        return run_op(home, "tf_expose", lambda: target, _renamed("stops being exposed"),
                      prefix="tfunnel expose:", as_json=as_json, op=ops_mcp.expose_remove)
    given = {"as": args.as_name, "category": args.category}
    built = {**target, **{k: v for k, v in given.items() if v is not None}, "enabled": not args.disabled}
    return run_op(home, "tf_expose", lambda: built, _renamed("exposed"), prefix="tfunnel expose:",
                  as_json=as_json)


def _renamed(done: str) -> Callable[[dict[str, Any]], str]:
    def headline(result: dict[str, Any]) -> str:
        entry = result.get("entry") or result.get("removed") or {}
        text = f"{entry.get('upstream')}/{entry.get('tool')}: {done}"
        return text + "".join(f"\n{line}" for line in result.get("notices", []))
    return headline


def hook_add_command(home: Path, args: argparse.Namespace) -> int:
    def build() -> dict[str, Any]:
        out: dict[str, Any] = {"id": args.id, "event": args.event}
        for key, value in (("matcher", args.matcher), ("command", args.hook_command),
                           ("timeout", args.timeout), ("description", args.description)):
            if value is not None:
                out[key] = value
        if args.script_file is not None:
            out["script"] = args.script or Path(args.script_file).name
            out["scriptText"] = read_text(args.script_file)
        elif args.script is not None:
            raise ToolFailure("--script names the file --script-file is written as; give --script-file too")
        if args.url is not None:
            out["url"] = args.url
        if args.header or args.allow_env:
            if args.url is None:
                raise ToolFailure("--header and --allow-env are for an http hook; give --url too")
            out["headers"] = dict(_header(text) for text in args.header or ())
            out["allowedEnvVars"] = list(args.allow_env or ())
        if args.disabled:
            out["enabled"] = False
        if args.fail_closed:
            out["failClosed"] = True
        return out

    return run_op(home, "tf_hook_add", build, lambda r: f"{r['id']}: added", prefix="tfunnel hook:",
                  as_json=getattr(args, "json", False))


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise ToolFailure(f"--header wants NAME=VALUE, got {text.split('=')[0][:40]!r}")
    return name.strip(), value


def settings_command(home: Path, args: argparse.Namespace) -> int:
    def build() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in args.pairs:
            if key.startswith("gate."):
                out.setdefault("gate", {})[key[5:]] = value
            else:
                out[key] = value
        return out

    def headline(result: dict[str, Any]) -> str:
        if args.action == "show":
            return "settings (toolfunnel.json; unset keys have their defaults)"
        if not result["changed"]:
            return "nothing changed"
        return (f"changed: {', '.join(result['changed'])}\n"
                f"restart the gateway for these to apply: {', '.join(result['restartRequired'])}")

    as_json = getattr(args, "json", False)
    if args.action == "show":
        try:
            result = ops_settings.settings(cli_env(home), {}).result
        except ToolFailure as exc:
            return fail("tfunnel settings:", str(exc), as_json=as_json)
        return succeed(result if as_json else result["settings"], headline(result), as_json=as_json)
    return run_op(home, "tf_settings", build, headline, prefix="tfunnel settings:", as_json=as_json)
