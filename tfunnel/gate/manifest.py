"""`hooks/hooks.manifest.json` and its `hooks/hooks.state.json` overlay, validated (pure reads).

`MANIFEST` and `HOOK_STATE` describe the two files for `config.files` (the one reading rule); they
are read separately, so a broken overlay keeps its own last good version, and combined with
`with_overlay`. A missing manifest means no hooks, a missing overlay means `{}`; a malformed one of
either (a bad entry included) refuses the start and, while running, the reload.

A ToolFunnel manifest loads unchanged: `${HOOKS_DIR}` in a command is expanded in memory only,
`hooksDir` is honoured when absolute, rows written without an `id` get a stable synthesized one
(ToolFunnel's UI wrote rows with only event, matcher, command and enabled). An unknown field in the
manifest or a row is a warning; `script` is known (ToolFunnel wrote it; informational only).

A row is a `command` hook (the default) or, as in Claude Code, an `http` hook: `url` (https, or
http to a loopback host; no user name or password in it), `headers` (string values, where `$VAR` and
`${VAR}` name variables of the environment; only those listed in `allowedEnvVars` are filled in,
every other reference is sent empty, as Claude Code does) and `allowedEnvVars`. `command` belongs
to command rows only, `url`, `headers` and `allowedEnvVars` to http rows only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tfunnel.auth.config import url_problem
from tfunnel.config.files import ConfigFile, read_config
from tfunnel.config.validate import Fields
from tfunnel.errors import ConfigError

MANIFEST_FILE = "hooks/hooks.manifest.json"
HOOK_STATE_FILE = "hooks/hooks.state.json"
EVENTS = ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "PreCompact")
# Accepted so Claude Code and ToolFunnel manifests load, but a gateway has no prompt or transcript.
NEVER_FIRING = frozenset({"UserPromptSubmit", "PreCompact"})
DEFAULT_TIMEOUT_S = 60.0
_ALWAYS = frozenset({"", "*"})
MANIFEST_KEYS = ("version", "hooksDir", "hooks")
HOOK_KEYS = ("id", "event", "matcher", "type", "command", "script", "timeout", "enabled", "failClosed",
             "description", "url", "headers", "allowedEnvVars")
HOOK_TYPES = ("command", "http")
# The fields of one type only: given on a row of the other type, each is a problem (a command row
# with a url would silently never call it).
_ONLY = {"command": ("url", "headers", "allowedEnvVars"), "http": ("command",)}
# A `$VAR` or `${VAR}` reference in an http hook's header value (Claude Code's two forms).
ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
# An HTTP header name (RFC 9110 token); a value is printable text without line breaks.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class HookSpec:
    id: str
    event: str
    command: str  # with ${HOOKS_DIR} expanded
    matcher: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S
    enabled: bool = False
    fail_closed: bool = False
    description: str = ""
    pattern: re.Pattern[str] | None = field(default=None, compare=False, repr=False)
    kind: str = "command"  # the row's `type`: "command" or "http"
    url: str = ""  # http only
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # http only, as written
    allowed_env_vars: tuple[str, ...] = ()  # http only

    def matches(self, names: Iterable[str]) -> bool:
        """`""`/`*`/absent fires always; otherwise the regex must fully match one of the names."""
        if self.pattern is None:
            return True
        return any(self.pattern.fullmatch(name) for name in names)


@dataclass(frozen=True)
class HookManifest:
    hooks_dir: Path
    hooks: tuple[HookSpec, ...] = ()

    def active(self, event: str) -> list[HookSpec]:
        """Enabled hooks of `event`, in manifest order."""
        return [h for h in self.hooks if h.enabled and h.event == event]


def compile_matcher(matcher: str) -> re.Pattern[str] | None:
    """The compiled matcher, or None for "fires always"; raises `re.error` if it does not compile."""
    return None if matcher.strip() in _ALWAYS else re.compile(matcher)


def load_manifest(home: Path) -> HookManifest:
    """The manifest with the state overlay applied; raise `ConfigError` naming file, entry and field
    for a problem in either file. A missing manifest means no hooks, a missing overlay `{}`."""
    manifest, overlay = read_config(home, MANIFEST), read_config(home, HOOK_STATE)
    if manifest.value is None or overlay.value is None:
        raise ConfigError([*manifest.problems, *overlay.problems])
    return with_overlay(manifest.value, overlay.value)


def with_overlay(manifest: HookManifest, overlay: Mapping[str, bool]) -> HookManifest:
    """`manifest` with each hook named in `overlay` switched as the overlay says (the overlay wins)."""
    hooks = tuple(replace(h, enabled=overlay[h.id]) if h.id in overlay else h for h in manifest.hooks)
    return replace(manifest, hooks=hooks)


def _manifest(home: Path, raw: dict[str, Any], f: Fields) -> HookManifest:
    default_dir = (home / MANIFEST_FILE).parent
    f.known(raw, None, MANIFEST_KEYS)
    hooks_dir_raw = f.string(raw, "hooksDir")
    hooks_dir = Path(hooks_dir_raw) if hooks_dir_raw and Path(hooks_dir_raw).is_absolute() else default_dir
    rows = f.array(raw, "hooks", "hook entries")
    specs: list[HookSpec] = []
    seen: set[str] = set()
    for index, row in enumerate(rows):
        spec = _spec(row, index, hooks_dir, f)
        if spec is None:
            continue
        if spec.id in seen:
            f.problem("duplicates an earlier hook's id", f"hooks[{index}] (id {spec.id!r})", "id")
        seen.add(spec.id)
        specs.append(spec)
    return HookManifest(hooks_dir, tuple(specs))


def _spec(row: Any, index: int, hooks_dir: Path, f: Fields) -> HookSpec | None:
    label = f"hooks[{index}]"
    if not isinstance(row, dict):
        f.problem("must be an object", label)
        return None
    before = len(f.problems)
    # ToolFunnel's UI wrote rows without an id; give them a stable one instead of refusing them.
    raw_event = row.get("event")
    fallback_id = f"{raw_event if raw_event in EVENTS else 'hook'}#{index}"
    hook_id = f.string(row, "id", label, non_empty=True, default=fallback_id)
    label = f"hooks[{index}] (id {hook_id!r})"
    f.known(row, label, HOOK_KEYS)
    event = f.choice(row, "event", label, EVENTS, "")
    if "event" not in row:
        f.problem(f"is required (one of {', '.join(EVENTS)})", label, "event")
    kind = f.choice(row, "type", label, HOOK_TYPES, "command")
    for key in _ONLY[kind]:
        if key in row:
            other = "http" if kind == "command" else "command"
            f.problem(f'belongs to a "type": "{other}" hook, not a "{kind}" one', label, key)
    command = url = ""
    if kind == "command":
        command = f.string(row, "command", label, required=True, non_empty=True)
    else:
        url = _url(row, label, f)
    headers, allowed = _headers(row, label, f) if kind == "http" else ((), ())
    matcher = f.string(row, "matcher", label)
    pattern = None
    try:
        pattern = compile_matcher(matcher)
    except re.error as exc:
        f.problem(f"is not a valid regular expression: {exc}", label, "matcher")
    timeout = f.positive(row, "timeout", label, DEFAULT_TIMEOUT_S) or DEFAULT_TIMEOUT_S
    enabled = f.boolean(row, "enabled", label)
    fail_closed = f.boolean(row, "failClosed", label)
    description = f.string(row, "description", label)
    f.string(row, "script", label)
    if len(f.problems) > before:
        return None
    return HookSpec(
        id=hook_id, event=event, matcher=matcher, pattern=pattern,
        command=command.replace("${HOOKS_DIR}", str(hooks_dir)),
        timeout_s=timeout, enabled=enabled is True, fail_closed=fail_closed is True,
        description=description, kind=kind, url=url, headers=headers, allowed_env_vars=allowed,
    )


def _url(row: Mapping[str, Any], label: str, f: Fields) -> str:
    url = f.string(row, "url", label, non_empty=True)
    if "url" not in row:
        f.problem('is required for a "type": "http" hook', label, "url")
    elif url:
        problem = url_problem(url, allow_query=True)
        if problem is not None:
            f.problem(problem, label, "url")
    return url


Headers = tuple[tuple[str, str], ...]


def _headers(row: Mapping[str, Any], label: str, f: Fields) -> tuple[Headers, tuple[str, ...]]:
    """The http row's headers and allowedEnvVars; a reference to a variable that allowedEnvVars
    does not list is a warning (Claude Code sends it empty, and so do we)."""
    raw_allowed = f.array(row, "allowedEnvVars", "environment variable names", label)
    allowed: list[str] = []
    for name in raw_allowed:
        if isinstance(name, str) and _ENV_NAME.fullmatch(name):
            allowed.append(name)
        else:
            f.problem(f"must hold variable names (like \"API_TOKEN\", no $), got {json.dumps(name)[:60]}",
                      label, "allowedEnvVars")
    headers: list[tuple[str, str]] = []
    for name, value in f.mapping(row, "headers", label).items():
        where = f"headers.{name}"
        if not _HEADER_NAME.fullmatch(name):
            f.problem("is not a valid HTTP header name", label, where)
        elif not isinstance(value, str) or not value.isprintable():
            f.problem("must be a string without line breaks or control characters", label, where)
        else:
            headers.append((name, value))
            for braced, bare in ENV_REFERENCE.findall(value):
                if (braced or bare) not in allowed:
                    f.warning(f"uses ${braced or bare}, which allowedEnvVars does not list: it is sent as "
                              "an empty string", label, where)
    return tuple(headers), tuple(allowed)


def shown_url(url: str) -> str:
    """An http hook's URL as logs, audit records and listings show it: without its query or
    fragment (where a token may hide)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


def load_hook_state(home: Path) -> dict[str, bool]:
    """The `{id: bool}` overlay (also read in the wrapped `{"enabled": {...}}` form).
    Missing → {}; malformed (bad JSON, a non-bool value) raises `ConfigError` naming the file."""
    return read_config(home, HOOK_STATE).start_value()


def _hook_state(home: Path, raw: dict[str, Any], f: Fields) -> dict[str, bool]:
    if isinstance(raw.get("enabled"), dict):
        for key in raw:  # the wrapped form is all-or-nothing: a switch beside it would be lost
            if key != "enabled" and not key.startswith("_"):
                f.problem('is beside "enabled": in the wrapped form {"enabled": {...}} every switch '
                          'goes inside "enabled"', repr(key))
        raw = raw["enabled"]
    overlay: dict[str, bool] = {}
    for key, value in raw.items():
        if isinstance(value, bool):
            overlay[key] = value
        else:
            f.problem('must be true or false (the file is {"<hook id>": true | false})', repr(key))
    return overlay


MANIFEST: ConfigFile[HookManifest] = ConfigFile(
    MANIFEST_FILE, "hook manifest", _manifest,
    absent=lambda home: HookManifest((home / MANIFEST_FILE).parent))
HOOK_STATE: ConfigFile[dict[str, bool]] = ConfigFile(HOOK_STATE_FILE, "hook state", _hook_state,
                                                     absent=lambda home: {})


def describe(spec: HookSpec) -> Mapping[str, Any]:
    """A row for `tfunnel hook list` (an http hook's URL without its query, no header values)."""
    row: dict[str, Any] = {"id": spec.id, "event": spec.event, "matcher": spec.matcher or "*",
                           "enabled": spec.enabled, "failClosed": spec.fail_closed, "timeout": spec.timeout_s}
    if spec.kind == "http":
        row.update(type="http", url=shown_url(spec.url), headers=sorted(name for name, _ in spec.headers))
    else:
        row["command"] = spec.command
    return row
