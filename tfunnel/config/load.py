"""Read and validate the files of a config home into `config.model` values.

`SETTINGS`, `REGISTER` and `STATE` describe the files for `config.files` (the one reading rule).
`load_settings`, `load_register` and `load_state` raise `ConfigError` carrying every problem they
found; a missing `toolfunnel.json` or state file means defaults, a missing register is an error.
`load_state` also returns the file's warnings (unknown fields).

Known fields, per object (anything else is a warning naming the nearest known field; keys starting
with `_` are comments). Known but ignored, for ToolFunnel homes: `path` and `covers` on register
entries (older ToolFunnel registers carried them; its drift check read them). A ToolFunnel `tf_*`
entry (`config.adopt`) is loaded as our built-in of that name, with a note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tfunnel.config.adopt import served_note, toolfunnel_management, unserved_warning
from tfunnel.config.expose import UPSTREAM_ID
from tfunnel.config.files import ConfigFile, load, read_config
from tfunnel.config.model import (
    BUILTIN_TOOL_NAMES,
    META_TOOL_NAMES,
    QUARANTINE_MODES,
    RESERVED_STATE_KEYS,
    TOKEN_COUNTERS,
    ApprovalSettings,
    GateSettings,
    Invoke,
    Limits,
    Register,
    Settings,
    ToolEntry,
    ToolState,
    Visibility,
)
from tfunnel.config.profiles import parse_profiles
from tfunnel.config.schema import schema_problem
from tfunnel.config.validate import Fields, _show
from tfunnel.errors import ConfigProblem

SETTINGS_FILE = "toolfunnel.json"
REGISTER_FILE = "tools/tools.register.json"
STATE_FILE = "tools/tools.state.json"
SCRIPTS_DIR = "tools/scripts"

# The largest `upstreamInstructionsMaxChars`: sections of 8 times this may go to every session.
MAX_INSTRUCTIONS_CHARS = 100_000
SETTINGS_KEYS = ("serverName", "serverVersion", "clientName", "clientVersion", "httpPort", "uiPort",
                 "serveLegacy", "upstreamInstructionsMaxChars", "tokens", "requires", "gate", "approvals",
                 "limits", "profiles", "stateKeyFile")
APPROVALS_KEYS = ("quarantine",)
GATE_KEYS = ("askFallback", "confirmManagement")
LIMITS_KEYS = ("maxMessageBytes", "toolTimeoutS", "toolOutputBytes", "shutdownGraceS", "upstreamStartS",
               "maxToolProcesses", "bodyReadTimeoutS", "idleTimeoutS", "maxHttpRequests", "maxSessions",
               "writeTimeoutS")
REQUIRES_KEYS = ("command", "versionArg", "min", "why")
REGISTER_KEYS = ("version", "description", "tools")
ENTRY_KEYS = ("id", "name", "summary", "category", "instructions", "inputSchema", "mode", "invoke",
              "timeoutS", "path", "covers", "examples")
INVOKE_KEYS = ("type", "path", "command", "name")
VISIBILITY_KEYS = ("enabled", "hidden", "hot")


def load_settings(home: Path) -> Settings:
    """`toolfunnel.json`; a missing file means every default."""
    return load(home, SETTINGS)


def _settings(home: Path, raw: dict[str, Any], f: Fields) -> Settings:
    f.known(raw, None, SETTINGS_KEYS)
    defaults, lim = Settings(), Limits()
    gate_raw = f.mapping(raw, "gate")
    limits_raw = f.mapping(raw, "limits")
    f.known(gate_raw, "gate", GATE_KEYS)
    approvals_raw = f.mapping(raw, "approvals")
    f.known(approvals_raw, "approvals", APPROVALS_KEYS)
    quarantine = f.choice(approvals_raw, "quarantine", "approvals", QUARANTINE_MODES, "suspicious")
    f.known(limits_raw, "limits", LIMITS_KEYS)
    limits = Limits(
        max_message_bytes=f.integer(limits_raw, "maxMessageBytes", "limits", 1024, 1 << 30,
                                    lim.max_message_bytes),
        tool_timeout_s=f.positive(limits_raw, "toolTimeoutS", "limits", lim.tool_timeout_s)
        or lim.tool_timeout_s,
        tool_output_bytes=f.integer(limits_raw, "toolOutputBytes", "limits", 1024, 1 << 30,
                                    lim.tool_output_bytes),
        shutdown_grace_s=f.positive(limits_raw, "shutdownGraceS", "limits", lim.shutdown_grace_s)
        or lim.shutdown_grace_s,
        upstream_start_s=f.positive(limits_raw, "upstreamStartS", "limits", lim.upstream_start_s)
        or lim.upstream_start_s,
        max_tool_processes=f.integer(limits_raw, "maxToolProcesses", "limits", 1, 4096,
                                     lim.max_tool_processes),
        body_read_timeout_s=f.positive(limits_raw, "bodyReadTimeoutS", "limits", lim.body_read_timeout_s)
        or lim.body_read_timeout_s,
        idle_timeout_s=f.positive(limits_raw, "idleTimeoutS", "limits", lim.idle_timeout_s)
        or lim.idle_timeout_s,
        write_timeout_s=f.positive(limits_raw, "writeTimeoutS", "limits", lim.write_timeout_s)
        or lim.write_timeout_s,
        max_http_requests=f.integer(limits_raw, "maxHttpRequests", "limits", 1, 1 << 16,
                                    lim.max_http_requests),
        max_sessions=f.integer(limits_raw, "maxSessions", "limits", 1, 1 << 16, lim.max_sessions),
    )
    ask = f.choice(gate_raw, "askFallback", "gate", ("deny", "allow"), "deny")
    confirm = f.choice(gate_raw, "confirmManagement", "gate", ("loosening", "all", "none"), "loosening")
    requires = f.array(raw, "requires", "requirement objects")
    for index, requirement in enumerate(requires):
        if isinstance(requirement, dict):
            f.known(requirement, f"requires[{index}]", REQUIRES_KEYS)
    serve_legacy = f.boolean(raw, "serveLegacy")
    tokens = f.choice(raw, "tokens", None, TOKEN_COUNTERS, defaults.tokens)
    settings = Settings(
        server_name=f.string(raw, "serverName", non_empty=True, default=defaults.server_name),
        server_version=f.string(raw, "serverVersion", non_empty=True, default=defaults.server_version),
        client_name=f.string(raw, "clientName", non_empty=True, default=defaults.client_name),
        client_version=f.string(raw, "clientVersion", non_empty=True, default=defaults.client_version),
        http_port=f.integer(raw, "httpPort", None, 1, 65535, defaults.http_port),
        ui_port=f.integer(raw, "uiPort", None, 1, 65535, defaults.ui_port),
        serve_legacy=True if serve_legacy is None else serve_legacy,
        upstream_instructions_max_chars=f.integer(raw, "upstreamInstructionsMaxChars", None, 0,
                                                  MAX_INSTRUCTIONS_CHARS,
                                                  defaults.upstream_instructions_max_chars),
        tokens=next(c for c in TOKEN_COUNTERS if c == tokens),
        requires=tuple(r for r in requires if isinstance(r, dict)),
        gate=GateSettings(ask_fallback="allow" if ask == "allow" else "deny",
                          confirm_management="all" if confirm == "all" else "none" if confirm == "none"
                          else "loosening"),
        approvals=ApprovalSettings(next(m for m in QUARANTINE_MODES if m == quarantine)),
        limits=limits,
        profiles=parse_profiles(raw, f),
        state_key_file=f.string(raw, "stateKeyFile", non_empty=True) or None,
        raw=raw,
    )
    return settings


def load_register(home: Path) -> Register:
    """`tools/tools.register.json`: `{version, description, tools:[entry]}`, validated whole."""
    return load(home, REGISTER)


def _register(home: Path, raw: dict[str, Any], f: Fields) -> Register:
    f.known(raw, None, REGISTER_KEYS)
    version = raw.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int | float):
        f.problem(f"must be a number, got {version!r}", None, "version")
    description = f.string(raw, "description")
    tools_raw = f.array(raw, "tools", "tool entries")
    tools: list[ToolEntry] = []
    seen: set[str] = set()
    for index, item in enumerate(tools_raw):
        entry = _tool_entry(item, index, f)
        if entry is None:
            continue
        label = f"tools[{index}] (id {entry.id!r})"
        if entry.id in seen:
            f.problem("duplicates an earlier entry's id", label, "id")
        elif entry.id in META_TOOL_NAMES or entry.id in RESERVED_STATE_KEYS:
            f.problem("is a reserved name", label, "id")
        seen.add(entry.id)
        tools.append(entry)
    return Register(version=version if isinstance(version, int | float) else 1,
                    description=description, tools=tuple(tools))


def _tool_entry(item: Any, index: int, f: Fields) -> ToolEntry | None:
    label = f"tools[{index}]"
    if not isinstance(item, dict):
        f.problem("must be an object", label)
        return None
    before = len(f.problems)
    tool_id = f.string(item, "id", label, required=True, non_empty=True)
    if tool_id:
        label = f"tools[{index}] (id {tool_id!r})"
    f.known(item, label, ENTRY_KEYS)
    name = f.string(item, "name", label, required=True, non_empty=True)
    summary = f.string(item, "summary", label)
    category = f.string(item, "category", label)
    instructions = f.string(item, "instructions", label)
    schema = _input_schema(item, label, f)
    invoke = _invoke(item, label, f)
    adopted = _adopt(tool_id, invoke, f)
    if adopted is not None:
        invoke = Invoke("builtin", tool_id)
    mode = f.choice(item, "mode", label, ("gateway", "reference"), "gateway" if invoke else "reference")
    if mode == "gateway" and invoke is None and "invoke" not in item:
        f.problem('is required when "mode" is "gateway"', label, "invoke")
    timeout = f.positive(item, "timeoutS", label, None)
    examples = _examples(item, label, f)
    if len(f.problems) > before:
        return None
    return ToolEntry(
        id=tool_id,
        name=name,
        summary=summary,
        category=category,
        instructions=instructions,
        input_schema=schema,
        mode="reference" if mode == "reference" else "gateway",
        invoke=invoke,
        timeout_s=timeout,
        adopted=adopted,
        examples=examples,
    )


def _adopt(tool_id: str, invoke: Invoke | None, f: Fields) -> str | None:
    """The ToolFunnel script a `tf_*` entry runs when our built-in of that name serves it instead
    (noted); None otherwise (one we have no built-in for is warned about and stays a script)."""
    name = toolfunnel_management(tool_id, invoke)
    if name is None or invoke is None:
        return None
    if name not in BUILTIN_TOOL_NAMES:
        f.note(unserved_warning(tool_id, invoke.target))
        return None
    f.note(served_note(tool_id, invoke.target))
    return invoke.target


def _examples(item: dict[str, Any], label: str, f: Fields) -> tuple[dict[str, Any], ...]:
    """`examples`: argument objects shown as example calls in the tool's instructions."""
    raw = item.get("examples", [])
    if not isinstance(raw, list):
        f.problem(f"must be an array of argument objects, got {_show(raw)}", label, "examples")
        return ()
    for index, example in enumerate(raw):
        if not isinstance(example, dict):
            f.problem(f"must be an object (the arguments of one example call), got {_show(example)}",
                      label, f"examples[{index}]")
    return tuple(dict(example) for example in raw if isinstance(example, dict))


def _input_schema(item: dict[str, Any], label: str, f: Fields) -> dict[str, Any] | None:
    if "inputSchema" not in item:
        return None
    schema = item["inputSchema"]
    if not isinstance(schema, dict):
        f.problem("must be a JSON Schema object", label, "inputSchema")
        return None
    if schema.get("type", "object") != "object":
        f.problem('must describe an object ("type": "object")', label, "inputSchema")
        return None
    problem = schema_problem(schema)  # imports jsonschema only for a schema it cannot vouch for
    if problem is not None:
        path, message = problem
        f.problem(f"is not a valid JSON Schema at {path}: {message}", label, "inputSchema")
        return None
    return schema


def _invoke(item: dict[str, Any], label: str, f: Fields) -> Invoke | None:
    if "invoke" not in item:
        return None
    raw = item["invoke"]
    if not isinstance(raw, dict):
        f.problem('must be {"type": "script", "path": ...}, {"type": "shell", "command": ...} or '
                  '{"type": "builtin", "name": ...}', label, "invoke")
        return None
    f.known(raw, label, INVOKE_KEYS, prefix="invoke.")
    kind = f.choice(raw, "type", label, ("script", "shell", "builtin"), "", field="invoke.type")
    if kind == "script":
        return Invoke("script", f.string(raw, "path", label, required=True, non_empty=True,
                                         field="invoke.path"))
    if kind == "shell":
        return Invoke("shell", f.string(raw, "command", label, required=True, non_empty=True,
                                        field="invoke.command"))
    if kind == "builtin":
        name = f.string(raw, "name", label, required=True, non_empty=True, field="invoke.name")
        if name and name not in BUILTIN_TOOL_NAMES:
            f.problem(f"is not a management tool of this version (known: {', '.join(BUILTIN_TOOL_NAMES)})",
                      label, "invoke.name")
        return Invoke("builtin", name)
    if "type" not in raw:
        f.problem('is required ("script", "shell" or "builtin")', label, "invoke.type")
    return None


def load_state(home: Path) -> tuple[ToolState, list[ConfigProblem]]:
    """`tools/tools.state.json` and its warnings: missing → defaults; a malformed file or entry
    raises `ConfigError` (never a silent fallback: a dropped `enabled: false` would re-enable a tool)."""
    reading = read_config(home, STATE)
    return reading.start_value(), list(reading.warnings)


def _state(home: Path, raw: dict[str, Any], f: Fields) -> ToolState:
    entries: dict[str, Visibility] = {}
    reserved: dict[str, str | None] = {"passthrough": None, "passthroughAs": None}
    for key, value in raw.items():
        if key in reserved:
            if value is not None and (not isinstance(value, str) or not UPSTREAM_ID.fullmatch(value)):
                f.problem("must be an upstream id (a letter or digit, then letters, digits, '_', '.' "
                          "and '-') or null", None, key)
            else:
                reserved[key] = value
            continue
        if not isinstance(value, dict):
            f.problem("must be an object like {\"enabled\": true, \"hot\": false, \"hidden\": false}",
                      repr(key))
            continue
        f.known(value, repr(key), VISIBILITY_KEYS)
        entries[key] = Visibility(
            enabled=f.boolean(value, "enabled", repr(key)),
            hidden=f.boolean(value, "hidden", repr(key)),
            hot=f.boolean(value, "hot", repr(key)),
        )
    if reserved["passthroughAs"] is not None and reserved["passthrough"] is None:
        f.warning("is set without \"passthrough\": no upstream is wrapped, so it changes nothing", None,
               "passthroughAs")
    return ToolState(entries=entries, passthrough=reserved["passthrough"],
                     passthrough_as=reserved["passthroughAs"])


SETTINGS: ConfigFile[Settings] = ConfigFile(SETTINGS_FILE, "toolfunnel.json", _settings,
                                            absent=lambda home: Settings())
REGISTER: ConfigFile[Register] = ConfigFile(
    REGISTER_FILE, "register", _register, missing_hint=' (an empty register is {"version": 1, "tools": []})')
STATE: ConfigFile[ToolState] = ConfigFile(STATE_FILE, "tool state", _state,
                                          absent=lambda home: ToolState())
