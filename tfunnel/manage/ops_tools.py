"""Register tools and their visibility: `tf_tool_add`, `tf_tool_set`, `tf_tool_update`.

Each returns a `Plan` (`manage.plans`); nothing here writes. Entries are written in the
register's own JSON shape, unknown fields of other entries kept as they are. A script a tool
brings (`scriptText`) goes to `tools/scripts/` under a bare file name, only there, and never
over another tool's. A tool that runs a shell command or a script it brings loosens the gate (the
hooks check its arguments, not its code), and so does re-enabling one an operator disabled.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from tfunnel.config.adopt import toolfunnel_management
from tfunnel.config.expose import TOOL_NAME, load_expose
from tfunnel.config.load import REGISTER, SCRIPTS_DIR, STATE
from tfunnel.config.model import BUILTIN_TOOL_NAMES, META_TOOL_NAMES, Invoke
from tfunnel.config.names import owners
from tfunnel.errors import ConfigError, ToolFailure
from tfunnel.gate.manifest import MANIFEST
from tfunnel.manage.edit import Change, Script, current, safe_path
from tfunnel.manage.ops_hooks import EMPTY_MANIFEST
from tfunnel.manage.plans import Env, Plan, changed_keys, runs, shown
from tfunnel.manage.rename import Refusal, ToolNames, plan_rename

EMPTY_REGISTER: Mapping[str, Any] = {"version": 1, "tools": []}
ENTRY_FIELDS = ("name", "summary", "category", "instructions", "inputSchema", "mode", "invoke", "timeoutS")
# tf_tool_set action → the state field it sets and the value.
VISIBILITY_ACTIONS: Mapping[str, tuple[str, bool]] = {
    "enable": ("enabled", True), "disable": ("enabled", False), "hot": ("hot", True),
    "unhot": ("hot", False), "hide": ("hidden", True), "unhide": ("hidden", False)}


def tool_add(env: Env, args: Mapping[str, Any]) -> Plan:
    register = current(env.home, REGISTER, EMPTY_REGISTER)
    tool_id = str(args["id"])
    rows = _rows(register)
    if not TOOL_NAME.fullmatch(tool_id):
        raise ToolFailure(f"id {tool_id!r} must be 1 to 128 letters, digits, '_', '.' or '-' "
                          "(it becomes the tool's name on the wire)")
    if tool_id in META_TOOL_NAMES or tool_id in BUILTIN_TOOL_NAMES:
        raise ToolFailure(f"id {tool_id!r} is the name of a built-in tool; choose another id")
    if any(row.get("id") == tool_id for row in rows):
        raise ToolFailure(f"id {tool_id!r} is already in the register; use tf_tool_update to change it")
    entry: dict[str, Any] = {"id": tool_id, **{k: args[k] for k in ENTRY_FIELDS if k in args}}
    scripts = _script(entry, args)
    for script in scripts:  # another tool's (or a helper module's) code is not ours to replace
        if safe_path(env.home, script.folder, script.name).exists():
            raise ToolFailure(f"{script.relative} exists; tf_tool_update rewrites a tool's own script")
    rows.append(entry)
    change = Change(f"add tool {tool_id!r} {shown(entry)}", {REGISTER: register}, scripts)
    result: dict[str, Any] = {"id": tool_id, "entry": entry}
    if scripts:
        result["scriptPath"] = scripts[0].relative
    return Plan(result, change, _new_code(tool_id, entry, scripts))


def tool_update(env: Env, args: Mapping[str, Any]) -> Plan:
    register = current(env.home, REGISTER, EMPTY_REGISTER)
    tool_id = str(args["id"])
    row = _row(register, tool_id)
    if _management(row):
        raise ToolFailure(f"{tool_id!r} is a management tool: its entry is the code's (an operator "
                          "restores a changed one with `tfunnel tool add-management`)")
    old_path = row.get("invoke", {}).get("path") if isinstance(row.get("invoke"), Mapping) else None
    patch = dict(args.get("patch") or {})
    if "id" in patch:
        raise ToolFailure('patch may not change "id" (remove the tool and add it under the new id)')
    unknown = sorted(set(patch) - set(ENTRY_FIELDS))
    if unknown:
        raise ToolFailure(f"patch has unknown field(s) {', '.join(unknown)}; "
                          f"allowed: {', '.join(ENTRY_FIELDS)}")
    before = dict(row)
    for key, value in patch.items():
        if value is None:
            row.pop(key, None)
        else:
            row[key] = value
    if _management(row):  # a patch must not turn a script tool into an in-process management tool
        raise ToolFailure(f"this patch would make {tool_id!r} ToolFunnel's management entry, which "
                          "tfunnel serves as its built-in; management tools are not made by patching")
    scripts = _script(row, args)
    for script in scripts:  # its own script only: never another tool's (or a shared helper's)
        others = [r.get("id") for r in _rows(register) if isinstance(r, dict) and r is not row
                  and isinstance(r.get("invoke"), Mapping) and r["invoke"].get("path") == script.relative]
        existing = safe_path(env.home, script.folder, script.name).exists()
        if others or (script.relative != old_path and existing):
            raise ToolFailure(f"{script.relative} is another tool's script, or an existing file; "
                              "scriptText rewrites the tool's own script only")
    if row == before and not scripts:
        raise ToolFailure(f"nothing to change for tool {tool_id!r}: give a patch or scriptText")
    what = ", ".join(changed_keys(before, row)) or "its script"
    documents: dict[Any, dict[str, Any]] = {REGISTER: register}
    if isinstance(row.get("name"), str) and row["name"] != before.get("name"):
        _follow_display(env, tool_id, str(before.get("name", "")), row["name"], documents)
    change = Change(f"update tool {tool_id!r} ({what}: {shown({k: row.get(k) for k in patch})})",
                    documents, scripts)
    new_code = _new_code(tool_id, row, scripts) if scripts or "invoke" in patch else None
    return Plan({"id": tool_id, "entry": row, **({"scriptPath": scripts[0].relative} if scripts else {})},
                change, new_code)


def tool_set(env: Env, args: Mapping[str, Any]) -> Plan:
    name, action = str(args["id"]), str(args["action"])
    state = current(env.home, STATE, {})
    if action == "remove":
        register = current(env.home, REGISTER, EMPTY_REGISTER)
        rows = _rows(register)
        _row(register, name)
        register["tools"] = [row for row in rows if row.get("id") != name]
        documents: dict[Any, dict[str, Any]] = {REGISTER: register}
        if name in state:
            del state[name]
            documents[STATE] = state
        return Plan({"id": name, "action": action, "removed": True},
                    Change(f"remove tool {name!r}", documents))
    if not _known(env, name):
        raise ToolFailure(f"no tool named {name!r}; tf_list {{\"kind\": \"tools\"}} lists them")
    key, value = VISIBILITY_ACTIONS[action]
    entry = state.get(name)
    entry = dict(entry) if isinstance(entry, Mapping) else {}
    was = entry.get(key)
    entry[key] = value
    state[name] = entry
    loosens = None
    if action == "enable" and was is False:
        loosens = f"{name!r} was disabled by an operator"
    return Plan({"id": name, "action": action, key: value, "state": entry},
                Change(f"{action} tool {name!r}", {STATE: state}), loosens)


def _follow_display(env: Env, tool_id: str, old: str, new: str, documents: dict[Any, dict[str, Any]]) -> None:
    """A new display name: hooks matching exactly the old one follow it (`manage.rename`); refused,
    naming the hook, when a pattern would stop firing for the tool."""
    manifest = current(env.home, MANIFEST, EMPTY_MANIFEST)
    state = current(env.home, STATE, {})
    plan = plan_rename(ToolNames(tool_id, tool_id, old), ToolNames(tool_id, tool_id, new),
                       manifest.get("hooks", []), state)
    if isinstance(plan, Refusal):
        raise ToolFailure("nothing was changed: " + "; ".join(plan.reasons))
    if plan.manifest_rows != manifest.get("hooks", []):
        documents[MANIFEST] = {**manifest, "hooks": plan.manifest_rows}


def _new_code(tool_id: str, entry: Mapping[str, Any], scripts: tuple[Script, ...]) -> str | None:
    """Why a tool's new entry loosens the gate: it runs a shell command, or a script it brings
    (the hooks check its calls' arguments, not what its code does)."""
    invoke = entry.get("invoke")
    if scripts:
        return runs(f"tool {tool_id!r}", {"script": scripts[0].relative, "text": scripts[0].text})
    if isinstance(invoke, Mapping) and invoke.get("type") in ("shell", "script"):
        return runs(f"tool {tool_id!r}", dict(invoke))
    return None


def _known(env: Env, name: str) -> bool:
    """Whether `name` is a tool (or prompt or resource) the state file may hold a key for."""
    if name in META_TOOL_NAMES or name.startswith(("prompt:", "resource:")):
        return True
    register = current(env.home, REGISTER, EMPTY_REGISTER)
    if any(row.get("id") == name for row in _rows(register)):
        return True
    catalog = env.catalog()
    if catalog is not None and catalog.find_upstream(name) is not None:
        return True
    # Not listed now (no gateway here, or its upstream is down): a name an upstream would surface.
    try:
        config = load_expose(env.home)
    except ConfigError:
        return False
    return bool(owners(name, [u.id for u in config.upstreams], config.expose))


def _rows(register: dict[str, Any]) -> list[Any]:
    rows = register.setdefault("tools", [])
    if not isinstance(rows, list):
        raise ToolFailure(f"{REGISTER.name}: \"tools\" is not a list; fix the file first")
    return rows


def _row(register: dict[str, Any], tool_id: str) -> dict[str, Any]:
    for row in _rows(register):
        if isinstance(row, dict) and row.get("id") == tool_id:
            return row
    known = [str(r.get("id")) for r in _rows(register) if isinstance(r, dict)]
    raise ToolFailure(f"no register tool with id {tool_id!r} (known: {', '.join(known) or 'none'})")


def _management(row: Mapping[str, Any]) -> bool:
    """A register row served as a management tool: ours (`invoke.type` builtin), or ToolFunnel's
    `tf_x` running `tools/scripts/tf-x.js`, which the loader serves as our built-in
    (`config.adopt`). Either is the code's, never a model's to rewrite."""
    invoke = row.get("invoke")
    if not isinstance(invoke, Mapping):
        return False
    if invoke.get("type") == "builtin":
        return True
    path, tool_id = invoke.get("path"), row.get("id")
    if invoke.get("type") != "script" or not isinstance(path, str) or not isinstance(tool_id, str):
        return False
    return toolfunnel_management(tool_id, Invoke("script", path)) in BUILTIN_TOOL_NAMES


def _script(entry: dict[str, Any], args: Mapping[str, Any]) -> tuple[Script, ...]:
    """The script `scriptText` brings, for an entry whose invoke is a script in tools/scripts/
    (a bare `path` is put there); () without scriptText."""
    invoke = entry.get("invoke")
    if isinstance(invoke, Mapping) and invoke.get("type") == "builtin":
        raise ToolFailure('invoke.type "builtin" is reserved for the management tools tfunnel ships')
    text = args.get("scriptText")
    if text is None:
        return ()
    if not isinstance(invoke, Mapping) or invoke.get("type") != "script" \
            or not isinstance(invoke.get("path"), str):
        raise ToolFailure('scriptText needs invoke {"type": "script", "path": "tools/scripts/<file>"}')
    path = PurePosixPath(invoke["path"])
    folder = str(path.parent) if str(path.parent) != "." else SCRIPTS_DIR
    if folder != SCRIPTS_DIR:
        raise ToolFailure(f"invoke.path {invoke['path']!r}: a script written with scriptText goes in "
                          f"{SCRIPTS_DIR}/ (give \"{SCRIPTS_DIR}/{path.name}\")")
    entry["invoke"] = {**invoke, "path": f"{SCRIPTS_DIR}/{path.name}"}
    return (Script(SCRIPTS_DIR, path.name, str(text)),)
