"""What a valid home would still hit when served: the checks `tfunnel check` adds to validation.

Each function looks at loaded, valid config and the machine (files, `PATH`), never starts a
process, and returns `ConfigProblem`s naming file, entry and field. Errors are what would make a
part of the gateway unusable (an upstream that cannot start, a hook or a script tool that cannot
run); warnings are what serve resolves by a rule and logs (which of two colliding names wins).
`serve` logs the same findings at start, so both agree on what is wrong.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from tfunnel.config.expose import EXPOSE_FILE, TRANSPORTS, ExposeConfig, UpstreamSpec
from tfunnel.config.load import REGISTER_FILE
from tfunnel.config.model import META_TOOL_NAMES, Register
from tfunnel.errors import ConfigProblem
from tfunnel.gate.manifest import MANIFEST_FILE, HookManifest, HookSpec
from tfunnel.tools.resolve import ScriptNotRunnable, resolve_script, script_argv
from tfunnel.upstream.isolation import isolation_problems

# Transports this version can start (the others are valid config, refused at start).
AVAILABLE_TRANSPORTS = frozenset({"stdio"})


@dataclass
class Findings:
    """Problems that make a part unusable, and rule-resolved conflicts worth knowing about."""

    errors: list[ConfigProblem] = field(default_factory=list)
    warnings: list[ConfigProblem] = field(default_factory=list)

    def extend(self, other: Findings) -> None:
        self.errors += other.errors
        self.warnings += other.warnings

    def all(self) -> list[ConfigProblem]:
        """Errors, then warnings (marked `severity="warning"`)."""
        return [*self.errors, *(replace(w, severity="warning") for w in self.warnings)]


def _label(kind: str, index: int, ident: str) -> str:
    return f"{kind}[{index}] (id {ident!r})"


def upstream_findings(expose: ExposeConfig, home: Path, env: Mapping[str, str]) -> Findings:
    """Enabled upstreams that would not start: transport not available here, isolation refusal,
    command not found (on the upstream's own `PATH`) or not executable, `cwd` missing."""
    found = Findings()
    for index, spec in enumerate(expose.upstreams):
        if not spec.enabled:
            continue
        label = _label("upstreams", index, spec.id)
        if spec.transport not in AVAILABLE_TRANSPORTS:
            found.errors.append(ConfigProblem(
                EXPOSE_FILE, f"transport {spec.transport!r} is not available in this version "
                f"(available: {', '.join(sorted(AVAILABLE_TRANSPORTS))}; known: {', '.join(TRANSPORTS)})",
                label, "transport"))
            continue
        found.errors += [ConfigProblem(EXPOSE_FILE, f"isolation guard: {text}", label)
                         for text in isolation_problems(spec, home)]
        cwd = spec.resolved_cwd(home)
        if not cwd.is_dir():
            found.errors.append(ConfigProblem(EXPOSE_FILE, f"{cwd} is not a folder", label, "cwd"))
            continue
        problem = _command_problem(spec, cwd, {**env, **spec.env})
        if problem is not None:
            found.errors.append(ConfigProblem(EXPOSE_FILE, problem, label, "command"))
    return found


def _command_problem(spec: UpstreamSpec, cwd: Path, env: Mapping[str, str]) -> str | None:
    return program_problem(spec.command, cwd, env.get("PATH", os.defpath))


def program_problem(program: str, cwd: Path, path: str) -> str | None:
    """Why `program` (as exec would look it up from `cwd` with `path`) cannot run, else None."""
    if "/" in program:
        target = Path(program) if Path(program).is_absolute() else cwd / program
        if not target.is_file():
            return f"{program!r} does not exist" + ("" if target == Path(program) else f" ({target})")
        if not os.access(target, os.X_OK):
            return f"{program!r} is not executable"
        return None
    if shutil.which(program, path=path) is None:
        return f"{program!r} is not found on PATH"
    return None


def hook_findings(manifest: HookManifest, home: Path, env: Mapping[str, str]) -> Findings:
    """Hooks whose program or script does not exist: an error for an enabled hook (it would
    never answer: a non-blocking error, or a deny when it fails closed), a warning for a
    disabled one (it fails the day it is enabled)."""
    found = Findings()
    for index, spec in enumerate(manifest.hooks):
        for problem in _hook_problems(spec, manifest.hooks_dir, home, env):
            item = ConfigProblem(MANIFEST_FILE, problem if spec.enabled else f"{problem} (the hook is "
                                 "disabled; it would fail once enabled)", _label("hooks", index, spec.id),
                                 "command")
            (found.errors if spec.enabled else found.warnings).append(item)
    return found


def _hook_problems(spec: HookSpec, hooks_dir: Path, home: Path, env: Mapping[str, str]) -> list[str]:
    # The variables the runner sets, expanded as the shell would for the simple forms.
    names = {"CLAUDE_PROJECT_DIR": str(home), "HOOKS_DIR": str(hooks_dir), "TFUNNEL_HOME": str(home)}
    command = spec.command
    for name, value in names.items():
        command = command.replace(f"${{{name}}}", value).replace(f"${name}", value)
    try:
        words = shlex.split(command)
    except ValueError:
        return []  # shell syntax beyond a simple command line: the shell is the judge
    if not words or "$" in words[0] or any(c in command for c in "|;&`<>"):
        return []
    problems: list[str] = []
    program = program_problem(words[0], home, env.get("PATH", os.defpath))
    if program is not None:
        problems.append(f"runs {program}")
    for word in words[1:]:
        candidate = Path(word)
        inside = candidate.is_absolute() and (candidate.is_relative_to(home) or
                                              candidate.is_relative_to(hooks_dir))
        if inside and not candidate.exists():
            problems.append(f"names {word}, which does not exist")
    return problems


def register_findings(register: Register, home: Path) -> Findings:
    """Script tools whose file is missing or not runnable."""
    found = Findings()
    for index, entry in enumerate(register.tools):
        if entry.invoke is not None and entry.invoke.type == "script":
            try:
                script_argv(resolve_script(home, entry.invoke.target))
            except ScriptNotRunnable as exc:
                found.errors.append(ConfigProblem(REGISTER_FILE, str(exc), _label("tools", index, entry.id),
                                                  "invoke.path"))
    return found


def name_findings(register: Register, expose: ExposeConfig) -> Findings:
    """Names that collide, and which one wins (SPEC §3: local first, then config order): local
    ids and display names, meta-tool names, enabled expose `as` names."""
    found = Findings()
    owner: dict[str, str] = {name: "a meta-tool" for name in META_TOOL_NAMES}
    for index, entry in enumerate(register.tools):
        label = _label("tools", index, entry.id)
        owner.setdefault(entry.id, f"tool {entry.id!r}")
        if entry.name != entry.id:
            winner = owner.setdefault(entry.name, f"tool {entry.id!r} (its display name)")
            if winner != f"tool {entry.id!r} (its display name)":
                found.warnings.append(ConfigProblem(
                    REGISTER_FILE, f"display name {entry.name!r} is also the name of {winner}, "
                    "which wins: this tool is reached by its id only", label, "name"))
    for index, item in enumerate(expose.expose):
        if not item.enabled:
            continue
        label = f"expose[{index}] ({item.upstream}/{item.tool})"
        mine = f"expose entry {item.upstream}/{item.tool}"
        winner = owner.setdefault(item.as_name, mine)
        if winner != mine:
            found.warnings.append(ConfigProblem(
                EXPOSE_FILE, f"surfaced name {item.as_name!r} is taken by {winner}, which wins: "
                "this upstream tool is left out of the surface", label, "as"))
    return found


def all_findings(groups: Iterable[Findings]) -> Findings:
    found = Findings()
    for group in groups:
        found.extend(group)
    return found
