"""`hooks/hooks.manifest.json` and its `hooks/hooks.state.json` overlay, validated (pure reads).

A ToolFunnel manifest loads unchanged: `${HOOKS_DIR}` in a command is expanded in memory only,
`hooksDir` is honoured when absolute, rows written without an `id` get a stable synthesized one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tfunnel.config.validate import Fields, read_json
from tfunnel.errors import ConfigError, ConfigProblem

MANIFEST_FILE = "hooks/hooks.manifest.json"
HOOK_STATE_FILE = "hooks/hooks.state.json"
EVENTS = ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "PreCompact")
# Accepted so Claude Code and ToolFunnel manifests load, but a gateway has no prompt or transcript.
NEVER_FIRING = frozenset({"UserPromptSubmit", "PreCompact"})
DEFAULT_TIMEOUT_S = 60.0
_ALWAYS = frozenset({"", "*"})


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
    """The manifest with the state overlay applied; raise `ConfigError` naming entry and field.

    A missing manifest means no hooks.
    """
    path = home / MANIFEST_FILE
    default_dir = path.parent
    if not path.exists():
        return HookManifest(default_dir)
    problems: list[ConfigProblem] = []
    f = Fields(MANIFEST_FILE, problems)
    try:
        raw = read_json(path, MANIFEST_FILE)
    except ValueError as exc:
        raise ConfigError([ConfigProblem(MANIFEST_FILE, str(exc))]) from exc
    if not isinstance(raw, dict):
        raise ConfigError([ConfigProblem(MANIFEST_FILE, "must contain a JSON object at the top level")])
    hooks_dir_raw = f.string(raw, "hooksDir")
    hooks_dir = Path(hooks_dir_raw) if hooks_dir_raw and Path(hooks_dir_raw).is_absolute() else default_dir
    rows = f.array(raw, "hooks", "hook entries")
    overlay, _ = load_hook_state(home)
    specs: list[HookSpec] = []
    seen: set[str] = set()
    for index, row in enumerate(rows):
        spec = _spec(row, index, hooks_dir, f)
        if spec is None:
            continue
        if spec.id in seen:
            f.problem("duplicates an earlier hook's id", f"hooks[{index}] (id {spec.id!r})", "id")
        seen.add(spec.id)
        if spec.id in overlay:
            spec = replace(spec, enabled=overlay[spec.id])
        specs.append(spec)
    if problems:
        raise ConfigError(problems)
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
    event = f.choice(row, "event", label, EVENTS, "")
    if "event" not in row:
        f.problem(f"is required (one of {', '.join(EVENTS)})", label, "event")
    command = f.string(row, "command", label, required=True, non_empty=True)
    f.choice(row, "type", label, ("command",), "command")
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
        description=description,
    )


def load_hook_state(home: Path) -> tuple[dict[str, bool], list[ConfigProblem]]:
    """The `{id: bool}` overlay (also read in the wrapped `{"enabled": {...}}` form).
    Missing → {}; malformed → {} with a problem for a loud warning."""
    path = home / HOOK_STATE_FILE
    if not path.exists():
        return {}, []
    try:
        raw = read_json(path, HOOK_STATE_FILE)
    except ValueError as exc:
        return {}, [ConfigProblem(HOOK_STATE_FILE, str(exc))]
    if isinstance(raw, dict) and isinstance(raw.get("enabled"), dict):
        raw = raw["enabled"]
    if not isinstance(raw, dict):
        return {}, [ConfigProblem(HOOK_STATE_FILE, 'must be an object like {"<hook id>": true}')]
    overlay: dict[str, bool] = {}
    problems: list[ConfigProblem] = []
    for key, value in raw.items():
        if isinstance(value, bool):
            overlay[key] = value
        else:
            problems.append(ConfigProblem(HOOK_STATE_FILE, "must be true or false", repr(key)))
    return overlay, problems


def describe(spec: HookSpec) -> Mapping[str, Any]:
    """A row for `tfunnel hook list`."""
    return {"id": spec.id, "event": spec.event, "matcher": spec.matcher or "*", "enabled": spec.enabled,
            "failClosed": spec.fail_closed, "timeout": spec.timeout_s, "command": spec.command}
