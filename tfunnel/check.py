"""`tfunnel check`: every problem in a home, all at once."""

from __future__ import annotations

from pathlib import Path

from tfunnel.audit import AuditLog
from tfunnel.config.expose import EXPOSE_FILE, load_expose
from tfunnel.config.load import REGISTER_FILE, load_register, load_settings, load_state
from tfunnel.errors import ConfigError, ConfigProblem
from tfunnel.gate.manifest import load_hook_state, load_manifest
from tfunnel.tools.resolve import ScriptNotRunnable, resolve_script, script_argv
from tfunnel.upstream.isolation import isolation_problems


def check_home(home: Path) -> list[ConfigProblem]:
    """Validate every file of the home; also report script invokes that cannot run."""
    problems: list[ConfigProblem] = []
    try:
        load_settings(home)
    except ConfigError as exc:
        problems.extend(exc.problems)
    problems.extend(load_state(home)[1])
    try:
        load_manifest(home)
    except ConfigError as exc:
        problems.extend(exc.problems)
    problems.extend(load_hook_state(home)[1])
    try:
        expose = load_expose(home)
    except ConfigError as exc:
        problems.extend(exc.problems)
    else:
        for index, spec in enumerate(expose.upstreams):
            if spec.enabled:
                label = f"upstreams[{index}] (id {spec.id!r})"
                problems += [ConfigProblem(EXPOSE_FILE, f"isolation guard: {text}", label)
                             for text in isolation_problems(spec, home)]
    problems.extend(AuditLog(home).problems)
    try:
        register = load_register(home)
    except ConfigError as exc:
        return problems + exc.problems
    for index, entry in enumerate(register.tools):
        if entry.invoke is not None and entry.invoke.type == "script":
            try:
                script_argv(resolve_script(home, entry.invoke.target))
            except ScriptNotRunnable as exc:
                label = f"tools[{index}] (id {entry.id!r})"
                problems.append(ConfigProblem(REGISTER_FILE, str(exc), label, "invoke.path"))
    return problems
