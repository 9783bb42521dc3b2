"""The management tools (`tf_*`): their definitions, and the one runner that plans, confirms,
writes and applies each call (`surface.context.Builtins`).

A call runs in-process, after the gate (it is an ordinary register tool, gated like any other).
Its arguments are checked against the schema here, whatever the register says. The operation
plans (`manage.ops_*`: pure reads of the home), the user confirms when `manage.plans.question`
says so (a legacy client through `elicitation/create`, a modern one with an `input_required`
round, bound to the exact change; a client that cannot be asked is refused), and the change is
written (`manage.edit.commit`, via "tf", by the calling session) and applied at once, so every
client hears of it (`list_changed`) without waiting for the file watcher.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import trio

from tfunnel.config.load import REGISTER
from tfunnel.config.model import BUILTIN_TOOL_NAMES, TOKEN_COUNTERS, Register, ToolEntry
from tfunnel.errors import ToolFailure
from tfunnel.gate.gated import AskUser, NeedsInput
from tfunnel.manage import ops_approvals, ops_hooks, ops_list, ops_mcp, ops_settings, ops_tools, ops_wrap
from tfunnel.manage.edit import Change, commit, current, encodable
from tfunnel.manage.plans import Env, Plan, question
from tfunnel.observe.audit import AuditLog
from tfunnel.protocol.results import ToolResult
from tfunnel.surface.validation import validate_args

_STR: dict[str, Any] = {"type": "string", "minLength": 1}
_ID: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": 128}  # each file checks its id rules
_OBJ: dict[str, Any] = {"type": "object"}


def _schema(properties: Mapping[str, Any], required: Iterable[str] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": dict(properties), "required": list(required),
            "additionalProperties": False}


def _nullable(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema`, or null (a patch's null removes the field)."""
    if "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None]}
    return {**schema, "type": [schema["type"], "null"]}


_ENTRY = {"name": _STR, "summary": {"type": "string"}, "category": {"type": "string"},
          "instructions": {"type": "string"}, "inputSchema": _OBJ,
          "mode": {"enum": ["gateway", "reference"]},
          "invoke": {"type": "object", "properties": {"type": {"enum": ["script", "shell"]},
                                                      "path": _STR, "command": _STR}, "required": ["type"]},
          "timeoutS": {"type": "number", "exclusiveMinimum": 0},
          "scriptText": {"type": "string", "description": "The script's text, written to tools/scripts/."}}
_UPSTREAM = {"id": _ID, "transport": {"enum": ["stdio", "http", "websocket"]}, "command": _STR,
             "args": {"type": "array", "items": {"type": "string"}},
             "env": {"type": "object", "additionalProperties": {"type": "string"}},
             "cwd": {"type": "string"}, "url": _STR,
             "headers": {"type": "object", "additionalProperties": {"type": "string"}},
             "enabled": {"type": "boolean"}, "description": {"type": "string"},
             "timeoutMs": {"type": "integer", "minimum": 1},
             "requestTimeoutMs": {"type": "integer", "minimum": 1},
             "legacyPin": {"type": "boolean"}, "modernOnly": {"type": "boolean"},
             "allowOutsidePaths": {"type": "boolean"}, "allowCodeLoadingEnv": {"type": "boolean"},
             "strictApproval": {"type": "boolean"}, "restart": _OBJ,
             "expose": {"type": "array", "items": _schema(
                 {"tool": _STR, "as": {"type": "string"}, "category": {"type": "string"},
                  "enabled": {"type": "boolean"}}, ["tool"])}}


@dataclass(frozen=True)
class Builtin:
    name: str
    title: str
    summary: str
    input_schema: Mapping[str, Any]
    plan: Callable[[Env, Mapping[str, Any]], Plan] | None = None
    # A read that waits on I/O (and changes nothing) instead of a plan.
    read: Callable[[Env, Mapping[str, Any]], Awaitable[dict[str, Any]]] | None = None


BUILTINS: Mapping[str, Builtin] = {b.name: b for b in (
    Builtin("tf_list", "List tools, upstreams, hooks, prompts or resources",
            "What this gateway has, with live state: tools (visibility), mcps (state, pid, tools, last "
            "error, exposed tools), hooks (enabled), prompts, resources.",
            _schema({"kind": {"enum": ["tools", "mcps", "hooks", "prompts", "resources"]},
                     "includeHidden": {"type": "boolean"}}, ["kind"]), ops_list.tf_list),
    Builtin("tf_tool_add", "Add a register tool",
            "Add a tool to the register (with its script, via scriptText); it is listed at once.",
            _schema({"id": _ID, **_ENTRY}, ["id", "name"]), ops_tools.tool_add),
    Builtin("tf_tool_set", "Change a tool's visibility, or remove it",
            "enable | disable | hot | unhot | hide | unhide a tool by name; remove a register tool. "
            "Re-enabling a tool an operator disabled needs the user's confirmation.",
            _schema({"id": _STR, "action": {"enum": [*ops_tools.VISIBILITY_ACTIONS, "remove"]}},
                    ["id", "action"]), ops_tools.tool_set),
    Builtin("tf_tool_update", "Change a register tool",
            "Patch a register tool's fields (null removes one) and/or rewrite its script (scriptText).",
            _schema({"id": _ID, "patch": _schema({k: _nullable(v) for k, v in _ENTRY.items()
                                                  if k != "scriptText"}),
                     "scriptText": _ENTRY["scriptText"]}, ["id"]), ops_tools.tool_update),
    Builtin("tf_mcp_add", "Attach an upstream MCP server",
            "Add an upstream (stdio command, or a url for http/websocket) and optionally expose tools; "
            "it starts at once. Opting out of the isolation guard needs the user's confirmation.",
            _schema(_UPSTREAM, ["id"]), ops_mcp.mcp_add),
    Builtin("tf_mcp_set", "Change an upstream",
            "enable | disable | remove | reconnect | pin (legacy era) | unpin an upstream.",
            _schema({"id": _ID,
                     "action": {"enum": ["enable", "disable", "remove", "reconnect", "pin", "unpin"]}},
                    ["id", "action"]), ops_mcp.mcp_set),
    Builtin("tf_mcp_discover", "Connect an upstream once and list what it has",
            "Connect a configured upstream (enabled or not) once, without exposing anything: its tools, "
            "prompts and resources, or why it does not come up.",
            _schema({"id": _ID}, ["id"]), read=ops_mcp.discover),
    Builtin("tf_expose", "Expose an upstream tool",
            "Put an upstream tool on the top level (curated-direct), optionally under another name; "
            "remove: true takes it off again (back to <upstream>_<tool>).",
            _schema({"upstream": _ID, "tool": _STR, "as": {"type": "string"}, "category": {"type": "string"},
                     "enabled": {"type": "boolean"}, "remove": {"type": "boolean"}}, ["upstream", "tool"]),
            ops_mcp.expose),
    Builtin("tf_hook_add", "Add a policy hook",
            "Add a hook (a command, a script via scriptText in hooks/scripts/, or an http hook: url, "
            "with optional headers whose $VAR come from allowedEnvVars); enabled unless said.",
            _schema({"id": _ID, "event": {"enum": ["PreToolUse", "PostToolUse", "SessionStart", "Stop",
                                                     "UserPromptSubmit", "PreCompact"]},
                     "matcher": {"type": "string"}, "command": _STR, "script": _STR,
                     "timeout": {"type": "number", "exclusiveMinimum": 0}, "enabled": {"type": "boolean"},
                     "description": {"type": "string"}, "failClosed": {"type": "boolean"},
                     "scriptText": {"type": "string"}, "url": _STR,
                     "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                     "allowedEnvVars": {"type": "array", "items": {"type": "string"}}},
                    ["id", "event"]), ops_hooks.hook_add),
    Builtin("tf_hook_set", "Enable, disable or remove a hook",
            "Disabling or removing a hook that is on needs the user's confirmation.",
            _schema({"id": _STR, "action": {"enum": ["enable", "disable", "remove"]}}, ["id", "action"]),
            ops_hooks.hook_set),
    Builtin("tf_log", "The audit log: on, off, status",
            "enable | disable | status of the audit log. Turning it off needs the user's confirmation.",
            _schema({"action": {"enum": ["enable", "disable", "status"]}, "path": _STR}, ["action"]),
            ops_settings.log),
    Builtin("tf_pack", "Pack this gateway",
            "Write a portable copy of the home (format home) or a pip-installable project that serves it "
            "(format python) to dist/<out> in the home.",
            _schema({"format": {"enum": ["home", "python"]}, "name": _STR, "version": _STR,
                     "description": {"type": "string"}, "out": _STR, "force": {"type": "boolean"},
                     "approvals": {"type": "boolean"}}), read=ops_settings.pack_home),
    Builtin("tf_settings", "Gateway settings",
            "Identity, ports, serveLegacy, the instructions cap, the token counter and gate.* (askFallback, "
            "confirmManagement). They apply after a restart; gate.* changes need the user's confirmation.",
            _schema({"serverName": _STR, "serverVersion": _STR, "clientName": _STR, "clientVersion": _STR,
                     "httpPort": {"type": "integer", "minimum": 1, "maximum": 65535},
                     "uiPort": {"type": "integer", "minimum": 1, "maximum": 65535},
                     "serveLegacy": {"type": "boolean"},
                     "upstreamInstructionsMaxChars": {"type": "integer", "minimum": 0},
                     "tokens": {"enum": list(TOKEN_COUNTERS)},
                     "gate": _schema({"askFallback": {"enum": ["deny", "allow"]},
                                      "confirmManagement": {"enum": ["loosening", "all", "none"]}})}),
            ops_settings.settings),
    Builtin("tf_accept_change", "Accept a held upstream change",
            "Approve what tool approvals hold for an upstream (a changed or quarantined tool, prompt, "
            "template or instructions): all it holds, or one item by name. Always needs the user's "
            "confirmation. With digests ({item: digest}, as listed), only what was reviewed: an item "
            "that holds another digest by now, or is not among them, refuses the whole change.",
            _schema({"upstream": _ID, "tool": _STR,
                     "digests": {"type": "object", "additionalProperties": {"type": "string"}}},
                    ["upstream"]), ops_approvals.accept_change),
    Builtin("tf_wrap", "Wrap one upstream: make it the whole surface",
            "{} shows the wrap and the upstreams; {upstream, as?, confirm: true} makes that enabled "
            "upstream the entire surface (its own tools, names and identity; the gate still runs), "
            "which hides tf_wrap itself, so only the command line's `tfunnel wrap --off` undoes it: "
            "always needs the user's confirmation; {off: true} clears the wrap.",
            _schema({"upstream": _ID,
                     "as": {**_ID, "description": "the server id the wrapped tools carry in hooks' "
                            "mcp__<id>__<tool> names (default: the upstream's id)"},
                     "confirm": {"type": "boolean",
                                 "description": "true: the user agrees to a wrap only the CLI undoes"},
                     "off": {"type": "boolean", "description": "true: clear the wrap"}}),
            ops_wrap.tf_wrap),
)}
assert tuple(BUILTINS) == BUILTIN_TOOL_NAMES  # the register loader checks names against that list


def served_register(register: Register) -> Register:
    """`register` as served: an entry of ToolFunnel's that our built-in serves (`ToolEntry.adopted`)
    gets the built-in's own inputSchema, which its calls are checked against anyway (the one the
    entry carries may be older, or absent)."""
    tools = tuple(replace(entry, input_schema=BUILTINS[entry.id].input_schema)
                  if entry.adopted is not None and entry.id in BUILTINS else entry
                  for entry in register.tools)
    return register if tools == register.tools else replace(register, tools=tools)


def register_entry(builtin: Builtin) -> dict[str, Any]:
    """The register entry that ships a management tool (`conf/tools/tools.register.json`)."""
    return {"id": builtin.name, "name": builtin.title, "summary": builtin.summary, "category": "management",
            "inputSchema": dict(builtin.input_schema), "invoke": {"type": "builtin", "name": builtin.name}}


def add_management(env: Env, args: Mapping[str, Any]) -> Plan:
    """Add the management tools a register lacks (a home seeded before they shipped); the
    command line's `tfunnel tool add-management` (in-band, `invoke.type` builtin is reserved)."""
    register = current(env.home, REGISTER, {"version": 1, "tools": []})
    rows = register.setdefault("tools", [])
    if not isinstance(rows, list):
        raise ToolFailure(f"{REGISTER.name}: \"tools\" is not a list; fix the file first")
    have = {row.get("id") for row in rows if isinstance(row, dict)}
    missing = [name for name in BUILTINS if name not in have]
    rows += [register_entry(BUILTINS[name]) for name in missing]
    change = Change(f"add the management tools {', '.join(missing)}", {REGISTER: register}) \
        if missing else None
    return Plan({"added": missing}, change)


class Management:
    """Runs the management tools of one home (`surface.context.Builtins`)."""

    def __init__(self, env: Env, audit: AuditLog, apply: Callable[[Iterable[str]], None]) -> None:
        self._env = env
        self._audit = audit
        self._apply = apply  # re-reads the written files in the running gateway
        self._lock = trio.Lock()  # one change at a time: each reads, then writes, whole files

    @property
    def home(self) -> Path:
        return self._env.home

    @property
    def env(self) -> Env:
        return self._env

    def _question(self, entry: ToolEntry, plan: Plan) -> str | None:
        return question(self._env.settings().gate.confirm_management, entry.id, plan)

    async def run(self, entry: ToolEntry, args: Mapping[str, Any], session_id: str,
                  ask: AskUser | None) -> ToolResult | NeedsInput:
        assert entry.invoke is not None
        builtin = BUILTINS.get(entry.invoke.target)
        if builtin is None:
            raise ToolFailure(f"{entry.id!r} names no management tool of this version")
        validate_args(builtin.name, builtin.input_schema, args)
        if not encodable(args):  # a lone surrogate: nothing we could write, ask about or log
            raise ToolFailure(f"{entry.id}: an argument holds a string that is not valid Unicode")
        if builtin.read is not None:
            return _result(await builtin.read(self._env, args))
        assert builtin.plan is not None
        plan = builtin.plan(self._env, args)
        asked = self._question(entry, plan)
        if asked is not None:  # asked without the lock: a person may take minutes to answer
            if ask is None:
                summary = plan.change.summary if plan.change is not None else "change the home"
                raise ToolFailure(f"{entry.id} would {summary}, which needs the user's confirmation, and "
                                  "this client cannot ask them; an operator can make the change with the "
                                  "tfunnel command line")
            answer = await ask(asked)
            if isinstance(answer, NeedsInput):
                return answer
            if not answer:
                raise ToolFailure("the user did not confirm the change; nothing was changed")
        async with self._lock:
            # Planned again under the lock: what is written is what was confirmed, or nothing.
            plan = builtin.plan(self._env, args)
            if self._question(entry, plan) != asked:
                raise ToolFailure("the home changed while the user was being asked; nothing was changed "
                                  "(call again to be asked about the change as it is now)")
            if plan.change is not None:
                written = commit(self._env.home, plan.change, self._audit, via="tf", by=session_id)
                self._apply(written)
        return _result(plan.result)


    async def operate(self, name: str, args: Mapping[str, Any], *, via: str) -> dict[str, Any]:
        """Run the management operation `name` for the operator (the admin UI): the same checks,
        plan, write and apply as its tf_* tool, with nothing asked (the operator is the one
        asking), audited with `via`. Returns the result with `ok`; raises `ToolFailure`."""
        builtin = BUILTINS.get(name)
        if builtin is None:
            raise ToolFailure(f"no management operation named {name!r}")
        validate_args(builtin.name, builtin.input_schema, args)
        if not encodable(args):
            raise ToolFailure(f"{name}: an argument holds a string that is not valid Unicode")
        if builtin.read is not None:
            return {"ok": True, **await builtin.read(self._env, args)}
        assert builtin.plan is not None
        async with self._lock:
            plan = builtin.plan(self._env, args)
            if plan.change is not None:
                written = commit(self._env.home, plan.change, self._audit, via=via)
                self._apply(written)
        return {"ok": True, **plan.result}


def _result(result: Mapping[str, Any]) -> ToolResult:
    body = {"ok": True, **result}
    return ToolResult(content=({"type": "text", "text": json.dumps(body, ensure_ascii=False)},),
                      structured=body)
