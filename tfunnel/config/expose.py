"""`mcp/expose.json`: the upstream MCP servers and the curated expose list, validated whole.

    {"version": 1, "namePrefix": "auto",
     "upstreams": [{"id": "time", "command": "mcp-server-time", "args": ["--local-timezone", "UTC"]}],
     "expose": [{"upstream": "time", "tool": "get_current_time", "as": "now"}]}

`load_expose` (and `parse_expose`, for a document already in memory) raise `ConfigError` carrying
every problem, each naming the file, the entry (`upstreams[2] (id 'git')`,
`expose[0] ('time', 'get_current_time')`) and the field. A missing file is an empty config.
An unknown field is a warning naming the nearest known one (`EXPOSE` reading, `tfunnel check`);
keys starting with `_` are comments (ToolFunnel's top-level `_README`), never unknown. Writers keep
every field verbatim. A ToolFunnel `expose.json` loads unchanged: optional strings may be `null`, and
an empty `"as"` means the default name, as ToolFunnel wrote them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from tfunnel.config.files import ConfigFile, load
from tfunnel.config.validate import Fields, _show
from tfunnel.errors import ConfigError, ConfigProblem

EXPOSE_FILE = "mcp/expose.json"
TRANSPORTS = ("stdio", "http", "websocket")
# The transports this version can start; the others are valid config, refused when started.
AVAILABLE_TRANSPORTS = ("stdio", "http", "websocket")
URL_SCHEMES = {"http": ("http", "https"), "websocket": ("ws", "wss")}
# An upstream id becomes part of surfaced tool names (`<id>_<tool>`, `mcp__<id>__<tool>`).
UPSTREAM_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# MCP tool names: the characters every client accepts, at most 128 of them.
TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
MAX_TIMEOUT_MS = 2**31 - 1  # ~24.8 days: beyond this a "timeout" is a typo, not a policy

Transport = Literal["stdio", "http", "websocket"]
# `namePrefix`: "auto" (default) surfaces `git`'s `git_status` as `git_status`; "always" keeps
# `<upstream>_<tool>` for every tool (`git_git_status`, the form before), for homes whose hooks
# and state keys depend on it.
NamePrefix = Literal["auto", "always"]
NAME_PREFIXES = ("auto", "always")

# What may follow the upstream id in a tool name for the name to count as already prefixed.
SEPARATORS = ("_", "-", ".")

EXPOSE_KEYS = ("version", "namePrefix", "upstreams", "expose")
UPSTREAM_KEYS = ("id", "transport", "command", "args", "env", "cwd", "url", "headers", "enabled",
                 "description", "timeoutMs", "requestTimeoutMs", "legacyPin", "modernOnly",
                 "allowOutsidePaths", "allowCodeLoadingEnv", "strictApproval", "restart", "reconnectAt")
RESTART_KEYS = ("maxRestarts", "windowS", "permanentFailureS", "initialBackoffS", "maxBackoffS")
EXPOSE_ENTRY_KEYS = ("upstream", "tool", "as", "category", "enabled")


@dataclass(frozen=True)
class RestartPolicy:
    """The supervisor's ceilings for one upstream (SPEC §6.2), from its `restart` block."""

    max_restarts: int = 5  # restart.maxRestarts: more than this many within window_s -> stopped
    window_s: float = 60.0  # restart.windowS: the sliding window of the crash-loop ceiling
    permanent_failure_s: float = 300.0  # restart.permanentFailureS: retry budget for unhealable failures
    initial_backoff_s: float = 1.0  # restart.initialBackoffS
    max_backoff_s: float = 30.0  # restart.maxBackoffS


@dataclass(frozen=True)
class UpstreamSpec:
    """One `upstreams[]` row. Compared by value (so `env`/`headers` are plain dicts; not hashable)."""

    id: str
    transport: Transport = "stdio"
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)  # merged over the gateway's environment
    cwd: str | None = None  # as written; resolve with resolved_cwd(home)
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    enabled: bool = True
    description: str = ""
    timeout_ms: int = 120000  # payload calls (tools/call, prompts/get, resources/read)
    request_timeout_ms: int = 10000  # control calls
    legacy_pin: bool = False
    modern_only: bool = False
    allow_outside_paths: bool = False
    allow_code_loading_env: bool = False
    strict_approval: bool = False
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    # "reconnectAt": written by `tfunnel mcp reconnect`; any change restarts the upstream.
    reconnect_at: str | None = None

    def resolved_cwd(self, home: Path) -> Path:
        """The child's working directory: the home by default; `~` expanded; relative -> the home."""
        if not self.cwd:
            return home
        cwd = Path(self.cwd).expanduser()
        return cwd if cwd.is_absolute() else home / cwd

    def definition(self) -> UpstreamSpec:
        """What decides how the child runs: two specs with equal definitions can share a running
        child (the `enabled` switch and the `description` note do not count)."""
        return replace(self, enabled=True, description="")


@dataclass(frozen=True)
class ExposeEntry:
    """One `expose[]` row: an upstream tool surfaced under `as_name` (natural key: upstream, tool)."""

    upstream: str
    tool: str
    as_name: str  # "as"; default `default_name` (`<upstream>_<tool>` unless already prefixed)
    category: str = ""
    enabled: bool = True
    # Whether `as` was written: without it the entry names nothing of its own, and the tool is named
    # by the default rule with the whole set (a contested short name falls back to the long form).
    named: bool = True


@dataclass(frozen=True)
class ExposeConfig:
    version: int | float = 1
    upstreams: tuple[UpstreamSpec, ...] = ()
    expose: tuple[ExposeEntry, ...] = ()
    name_prefix: NamePrefix = "auto"

    def upstream(self, upstream_id: str) -> UpstreamSpec | None:
        """The upstream with this id, or None."""
        return next((u for u in self.upstreams if u.id == upstream_id), None)


def long_name(upstream: str, tool: str) -> str:
    """`<upstream>_<tool>`: the default name under `namePrefix: "always"` and on a collision."""
    return f"{upstream}_{tool}"


def short_name(upstream: str, tool: str, name_prefix: str = "auto") -> str | None:
    """The tool's own name when it already begins with the upstream id and a separator (and has more
    after it), under `namePrefix: "auto"`; else None. Case-sensitive: `git` shortens `git_status`,
    not `Git_status`, and never `github_x` (no separator after the id)."""
    if name_prefix == "always":
        return None
    cut = len(upstream)
    if len(tool) > cut + 1 and tool.startswith(upstream) and tool[cut] in SEPARATORS:
        return tool
    return None


def default_name(upstream: str, tool: str, name_prefix: str = "auto") -> str:
    """The name a tool gets when nothing else claims its short name (`short_name`, else long)."""
    return short_name(upstream, tool, name_prefix) or long_name(upstream, tool)


def empty_document() -> dict[str, Any]:
    """What a writer creates when the file is missing (a fresh object each call)."""
    return {"version": 1, "upstreams": [], "expose": []}


def load_expose(home: Path) -> ExposeConfig:
    """`mcp/expose.json` of `home`; missing -> empty config; raises `ConfigError` with every problem."""
    return load(home, EXPOSE)


def parse_expose(raw: Any) -> ExposeConfig:
    """Validate a parsed `expose.json` document; raises `ConfigError` with every problem."""
    problems: list[ConfigProblem] = []
    f = Fields(EXPOSE_FILE, problems)
    if not isinstance(raw, dict):
        f.problem("must contain a JSON object at the top level")
        raise ConfigError(problems)
    config = _parse(Path(), raw, f)
    if problems:
        raise ConfigError(problems)
    return config


def _parse(home: Path, raw: dict[str, Any], f: Fields) -> ExposeConfig:
    f.known(raw, None, EXPOSE_KEYS)
    version = raw.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int | float):
        f.problem(f"must be a number, got {_show(version)}", None, "version")
        version = 1
    name_prefix = raw.get("namePrefix", "auto")
    if name_prefix not in NAME_PREFIXES:
        f.problem(f'must be "auto" (surface `git`\'s `git_status` as `git_status`) or "always" (keep '
                  f'`<upstream>_<tool>`), got {_show(name_prefix)}', None, "namePrefix")
        name_prefix = "auto"
    rows = f.array(raw, "upstreams", "upstream entries")
    items = f.array(raw, "expose", "expose entries")
    # Every id that was spelled as a string counts as configured, so an upstream row with some other
    # problem does not also make each of its expose rows an error.
    declared = [row["id"] for row in rows if isinstance(row, dict) and isinstance(row.get("id"), str)]
    upstreams: list[UpstreamSpec] = []
    seen_ids: set[str] = set()
    for index, row in enumerate(rows):
        spec = _upstream(row, index, f)
        if spec is None:
            continue
        if spec.id in seen_ids:
            f.problem("duplicates an earlier upstream's id", f"upstreams[{index}] (id {spec.id!r})", "id")
        seen_ids.add(spec.id)
        upstreams.append(spec)
    entries: list[ExposeEntry] = []
    seen_keys: dict[tuple[str, str], int] = {}
    seen_names: dict[str, int] = {}
    for index, item in enumerate(items):
        entry = _expose_entry(item, index, declared, f, cast(NamePrefix, name_prefix))
        if entry is None:
            continue
        label = _expose_label(index, item)
        key = (entry.upstream, entry.tool)
        if key in seen_keys:
            f.problem(f"duplicates expose[{seen_keys[key]}] (same upstream and tool)", label, "tool")
        elif entry.as_name in seen_names:
            f.problem(f"{entry.as_name!r} is already the name of expose[{seen_names[entry.as_name]}]",
                      label, "as")
        seen_keys.setdefault(key, index)
        seen_names.setdefault(entry.as_name, index)
        entries.append(entry)
    return ExposeConfig(version=version, upstreams=tuple(upstreams), expose=tuple(entries),
                        name_prefix=cast(NamePrefix, name_prefix))


EXPOSE: ConfigFile[ExposeConfig] = ConfigFile(EXPOSE_FILE, "expose.json", _parse,
                                              absent=lambda home: ExposeConfig())


def _upstream(row: Any, index: int, f: Fields) -> UpstreamSpec | None:
    label = f"upstreams[{index}]"
    if not isinstance(row, dict):
        f.problem(f"must be an object, got {_show(row)}", label)
        return None
    before = len(f.problems)
    upstream_id = f.string(row, "id", label, required=True, non_empty=True)
    if upstream_id:
        label = f"upstreams[{index}] (id {upstream_id!r})"
    f.known(row, label, UPSTREAM_KEYS)
    if upstream_id and not UPSTREAM_ID.fullmatch(upstream_id):
        f.problem("must start with a letter or digit and use only letters, digits, '_', '.' and '-' "
                  f"(it becomes part of tool names); got {_show(upstream_id)}", label, "id")
    transport_ok = row.get("transport", "stdio") in TRANSPORTS
    transport = f.choice(row, "transport", label, TRANSPORTS, "stdio")
    if transport == "stdio" and transport_ok and "command" not in row:
        f.problem("is required for a stdio upstream", label, "command")
    command = f.string(row, "command", label, non_empty=transport == "stdio" and transport_ok)
    url = _optional_string(row, "url", label, f)
    if transport in URL_SCHEMES and transport_ok:
        _check_url(url, transport, label, f)
    spec = UpstreamSpec(
        id=upstream_id,
        transport=cast(Transport, transport),
        command=command,
        args=_string_list(row, "args", label, f),
        env=_string_map(row, "env", label, f, variable_names=True),
        cwd=_optional_string(row, "cwd", label, f),
        url=url,
        headers=_string_map(row, "headers", label, f, variable_names=False),
        enabled=f.boolean(row, "enabled", label) is not False,
        description=f.string(row, "description", label),
        timeout_ms=f.integer(row, "timeoutMs", label, 1, MAX_TIMEOUT_MS, 120000),
        request_timeout_ms=f.integer(row, "requestTimeoutMs", label, 1, MAX_TIMEOUT_MS, 10000),
        legacy_pin=f.boolean(row, "legacyPin", label) is True,
        modern_only=f.boolean(row, "modernOnly", label) is True,
        allow_outside_paths=f.boolean(row, "allowOutsidePaths", label) is True,
        allow_code_loading_env=f.boolean(row, "allowCodeLoadingEnv", label) is True,
        strict_approval=f.boolean(row, "strictApproval", label) is True,
        restart=_restart(row, label, f),
        reconnect_at=_optional_string(row, "reconnectAt", label, f),
    )
    if spec.legacy_pin and spec.modern_only:
        f.problem("cannot be true together with legacyPin: they contradict (legacyPin forces the legacy "
                  "era, modernOnly refuses it)", label, "modernOnly")
    return spec if len(f.problems) == before else None


def _optional_string(row: Mapping[str, Any], key: str, label: str, f: Fields) -> str | None:
    """An optional string; absent or null -> None."""
    if row.get(key) is None:
        return None
    value = f.string(row, key, label)  # records the problem for a non-string
    return value if isinstance(row[key], str) else None


def _check_url(url: str | None, transport: str, label: str, f: Fields) -> None:
    schemes = URL_SCHEMES[transport]
    wanted = " or ".join(f"{s}://" for s in schemes)
    if url is None:
        f.problem(f"is required for a {transport} upstream ({wanted}...)", label, "url")
        return
    try:
        parts = urlsplit(url)
        ok = parts.scheme.lower() in schemes and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        f.problem(f"must be a URL starting with {wanted} and naming a host, got {_show(url)}",
                  label, "url")


def _string_list(row: Mapping[str, Any], key: str, label: str, f: Fields) -> tuple[str, ...]:
    value = row.get(key, [])
    if not isinstance(value, list):
        f.problem(f"must be an array of strings, got {_show(value)}", label, key)
        return ()
    for i, item in enumerate(value):
        if not isinstance(item, str):
            f.problem(f"must be a string, got {_show(item)}", label, f"{key}[{i}]")
    return tuple(item for item in value if isinstance(item, str))


def _string_map(
    row: Mapping[str, Any], key: str, label: str, f: Fields, *, variable_names: bool
) -> dict[str, str]:
    value = row.get(key, {})
    if not isinstance(value, dict):
        f.problem(f"must be an object of string values, got {_show(value)}", label, key)
        return {}
    for name, item in value.items():
        if variable_names and (not name or "=" in name or "\0" in name):
            f.problem("is not a valid environment variable name", label, f"{key}.{name}")
        if not isinstance(item, str):
            f.problem(f"must be a string, got {_show(item)}", label, f"{key}.{name}")
        elif variable_names and "\0" in item:
            f.problem("must not contain a NUL character", label, f"{key}.{name}")
    return {name: item for name, item in value.items() if isinstance(item, str)}


def _restart(row: Mapping[str, Any], label: str, f: Fields) -> RestartPolicy:
    raw = f.mapping(row, "restart", label)
    f.known(raw, label, RESTART_KEYS, prefix="restart.")
    d = RestartPolicy()

    def number(key: str, default: float) -> float:
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                or value <= 0:
            f.problem(f"must be a positive number, got {_show(value)}", label, f"restart.{key}")
            return default
        return float(value)

    max_restarts = raw.get("maxRestarts", d.max_restarts)
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        f.problem(f"must be a non-negative integer, got {_show(max_restarts)}", label, "restart.maxRestarts")
        max_restarts = d.max_restarts
    policy = RestartPolicy(
        max_restarts=max_restarts,
        window_s=number("windowS", d.window_s),
        permanent_failure_s=number("permanentFailureS", d.permanent_failure_s),
        initial_backoff_s=number("initialBackoffS", d.initial_backoff_s),
        max_backoff_s=number("maxBackoffS", d.max_backoff_s),
    )
    if policy.initial_backoff_s > policy.max_backoff_s:
        f.problem(f"({policy.initial_backoff_s:g}) must not exceed restart.maxBackoffS "
                  f"({policy.max_backoff_s:g})", label, "restart.initialBackoffS")
    return policy


def _expose_label(index: int, item: Any) -> str:
    if isinstance(item, dict) and isinstance(item.get("upstream"), str) and isinstance(item.get("tool"), str):
        return f"expose[{index}] ({item['upstream']!r}, {item['tool']!r})"
    return f"expose[{index}]"


def _expose_entry(item: Any, index: int, declared: list[str], f: Fields,
                  name_prefix: NamePrefix) -> ExposeEntry | None:
    label = _expose_label(index, item)
    if not isinstance(item, dict):
        f.problem(f"must be an object, got {_show(item)}", label)
        return None
    before = len(f.problems)
    f.known(item, label, EXPOSE_ENTRY_KEYS)
    upstream = f.string(item, "upstream", label, required=True, non_empty=True)
    if upstream and upstream not in declared:
        known = ", ".join(repr(u) for u in declared) or "none"
        f.problem(f"names no configured upstream (configured: {known})", label, "upstream")
    tool = f.string(item, "tool", label, required=True, non_empty=True)
    # ToolFunnel wrote an empty (or null) "as" to mean the default name.
    as_name = (_optional_string(item, "as", label, f) or "") or default_name(upstream, tool, name_prefix)
    if isinstance(item.get("as"), str) and item["as"] and not TOOL_NAME.fullmatch(as_name):
        f.problem(f"must be 1 to 128 letters, digits, '_', '.' or '-', got {_show(as_name)}", label, "as")
    category = f.string(item, "category", label)
    enabled = f.boolean(item, "enabled", label)
    if len(f.problems) > before:
        return None
    written = isinstance(item.get("as"), str) and bool(item["as"])
    return ExposeEntry(upstream=upstream, tool=tool, as_name=as_name, category=category,
                       enabled=enabled is not False, named=written)
