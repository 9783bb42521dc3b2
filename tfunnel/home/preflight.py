"""What a valid home would still hit when served: the checks `tfunnel check` adds to validation.

Each function looks at loaded, valid config and the machine (files, `PATH`), never starts a
process, and returns `ConfigProblem`s naming file, entry and field. Errors are what would make a
part of the gateway unusable (an upstream that cannot start, a hook or a script tool that cannot
run); warnings are what serve resolves by a rule (which of two colliding names wins) or ignores
(an overlay switch that names nothing). `serve` logs the same findings at start, so both agree on
what is wrong. Nothing here raises for a path the system refuses to look at: that is a finding.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from tfunnel.config.expose import AVAILABLE_TRANSPORTS, EXPOSE_FILE, SEPARATORS, ExposeConfig, short_name
from tfunnel.config.load import REGISTER_FILE, STATE_FILE
from tfunnel.config.model import META_TOOL_NAMES, PROMPT_PREFIX, RESOURCE_PREFIX, Register, ToolState
from tfunnel.errors import ConfigProblem
from tfunnel.gate.manifest import HOOK_STATE_FILE, MANIFEST_FILE, HookManifest, HookSpec
from tfunnel.gate.runner import hook_variables
from tfunnel.tools.resolve import ScriptNotRunnable, resolve_script, script_argv
from tfunnel.upstream.isolation import isolation_problems
from tfunnel.upstream.remote import expand_headers
from tfunnel.upstream.transport import SpawnFailed


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


Kind = Literal["file", "dir", "other", "missing"]


def path_kind(path: Path) -> Kind | str:
    """What is at `path`, or why the system would not say (a name too long, no permission, a NUL)."""
    try:
        if path.is_file():
            return "file"
        if path.is_dir():
            return "dir"
        return "other" if os.path.lexists(path) else "missing"
    except (OSError, ValueError) as exc:
        return f"cannot be looked at: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}"


def upstream_findings(expose: ExposeConfig, home: Path, env: Mapping[str, str]) -> Findings:
    """Enabled upstreams that would not start: transport not available here, isolation refusal,
    command not found (on the upstream's own `PATH`) or not executable, `cwd` missing; for a
    remote one, a header that refers to a variable `env` does not have."""
    found = Findings()
    for index, spec in enumerate(expose.upstreams):
        if not spec.enabled:
            continue
        label = _label("upstreams", index, spec.id)
        if spec.transport not in AVAILABLE_TRANSPORTS:
            found.errors.append(ConfigProblem(
                EXPOSE_FILE, f"transport {spec.transport!r} is not available in this version "
                f"(available: {', '.join(AVAILABLE_TRANSPORTS)})", label, "transport"))
            continue
        if spec.transport != "stdio":  # a remote upstream has no command, cwd or isolation to check
            try:  # but its headers' `${NAME}` must be set where the gateway runs
                expand_headers(spec.id, spec.headers, env)
            except SpawnFailed as exc:
                found.errors.append(ConfigProblem(EXPOSE_FILE, str(exc).split(": ", 1)[-1], label, "headers"))
            continue
        found.errors += [ConfigProblem(EXPOSE_FILE, f"isolation guard: {text}", label)
                         for text in isolation_problems(spec, home)]
        cwd = spec.resolved_cwd(home)
        kind = path_kind(cwd)
        if kind != "dir":
            what = "does not exist" if kind == "missing" else "is not a folder" if kind in ("file", "other") \
                else kind
            found.errors.append(ConfigProblem(EXPOSE_FILE, f"{cwd} {what}", label, "cwd"))
            continue
        problem = program_problem(spec.command, cwd, {**env, **spec.env}.get("PATH", os.defpath))
        if problem is not None:
            found.errors.append(ConfigProblem(EXPOSE_FILE, problem, label, "command"))
    return found


def program_problem(program: str, cwd: Path, path: str) -> str | None:
    """Why `program` (as exec would look it up from `cwd` with `path`) cannot run, else None."""
    if "/" not in program:
        try:
            found = shutil.which(program, path=path)
        except (OSError, ValueError):
            found = None
        return None if found is not None else f"{program!r} is not found on PATH"
    target = Path(program) if Path(program).is_absolute() else cwd / program
    shown = "" if target == Path(program) else f" ({target})"
    kind = path_kind(target)
    if kind == "missing":
        return f"{program!r} does not exist{shown}"
    if kind != "file":
        return f"{program!r} is not a file{shown}" if kind in ("dir", "other") else f"{program!r} {kind}"
    if not os.access(target, os.X_OK):
        return f"{program!r} is not executable"
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
    command = spec.command
    for name, value in hook_variables(home, hooks_dir).items():
        command = command.replace(f"${{{name}}}", value).replace(f"${name}", value)
    try:
        words = shlex.split(command)
    except ValueError:
        return []  # shell syntax beyond a simple command line: the shell is the judge
    if not words or "$" in words[0] or any(c in command for c in "|;&`<>"):
        return []
    problems: list[str] = []
    program = program_problem(words[0], home, env.get("PATH", os.defpath))  # hooks run in the home
    if program is not None:
        problems.append(f"runs {program}")
    script = _script_word(words)
    if script is None or "/" not in script or "$" in script:
        return problems  # no script, a bare name, or something only the shell can expand
    candidate = Path(script) if Path(script).is_absolute() else home / script
    if not (candidate.is_relative_to(home) or candidate.is_relative_to(hooks_dir)):
        return problems  # outside the home: not ours to guess about
    kind = path_kind(candidate)
    if kind == "missing":
        problems.append(f"names {script}, which does not exist")
    elif kind not in ("file", "dir", "other"):
        problems.append(f"names {script}, which {kind}")
    return problems


# Programs whose first argument (after options) is the script they run. Other words of a command
# line are not second-guessed: `touch out.log` names a file the hook is about to create.
_INTERPRETERS = re.compile(r"(python|pypy|node|deno|bun|ruby|perl|php|bash|sh|dash|zsh|ksh|lua|tclsh)"
                           r"[0-9.]*")


def _script_word(words: list[str]) -> str | None:
    if not _INTERPRETERS.fullmatch(os.path.basename(words[0])):
        return None
    for word in words[1:]:
        if word in ("-c", "-m", "-e", "-E", "-p", "--eval", "--print"):
            return None  # code or a module on the command line, no script file
        if not word.startswith("-"):
            return word
    return None


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
    """Names that collide, and which one wins, by the lookup the surface uses: a register tool is
    found by its id before any display name, display names in register order; an upstream tool
    never takes a name a register tool answers to (nor a meta-tool's), expose entries in order."""
    found = Findings()
    ids = {entry.id: entry for entry in register.tools}
    shown: dict[str, str] = {}  # display name -> the id of the first tool showing it
    for index, entry in enumerate(register.tools):
        if entry.name == entry.id:
            continue
        label = _label("tools", index, entry.id)
        if entry.name in ids:
            why = f"is the id of tool {entry.name!r}, which wins (ids are looked up first)"
        elif entry.name in META_TOOL_NAMES:
            why = "is a meta-tool's name, which wins on the top level and in `tfunnel call`"
        elif entry.name in shown:
            why = f"is also the display name of tool {shown[entry.name]!r}, listed earlier, which wins"
        else:
            shown[entry.name] = entry.id
            continue
        found.warnings.append(ConfigProblem(REGISTER_FILE, f"display name {entry.name!r} {why}: reach "
                                            "this tool by its id", label, "name"))
    taken: dict[str, str] = {name: "a meta-tool" for name in META_TOOL_NAMES}
    taken |= {tid: f"tool {tid!r}" for tid in ids}
    taken |= {name: f"tool {tid!r} (its display name)" for name, tid in shown.items() if name not in taken}
    for index, item in enumerate(expose.expose):
        if not item.enabled or not item.named:  # without "as" a taken default falls back to the long form
            continue
        mine = f"expose entry {item.upstream}/{item.tool}"
        winner = taken.setdefault(item.as_name, mine)
        if winner != mine:
            found.warnings.append(ConfigProblem(
                EXPOSE_FILE, f"surfaced name {item.as_name!r} is taken by {winner}, which wins: "
                "this upstream tool is left out of the surface", f"expose[{index}] ({item.upstream}/"
                f"{item.tool})", "as"))
    return found


def overlay_findings(register: Register, expose: ExposeConfig, state: ToolState, manifest: HookManifest,
                     hook_overlay: Mapping[str, bool]) -> Findings:
    """Overlay switches that name nothing (a typo leaves the tool or hook as it was, which may be
    looser than the operator meant): state keys that are no meta-tool, register id, expose name,
    `<upstream id>_` name, `prompt:<upstream id>_` name or `resource:` URI (what an upstream
    lists is not known here); hook-state keys that are no hook id."""
    found = Findings()
    names = {*META_TOOL_NAMES, *(e.id for e in register.tools), *(e.as_name for e in expose.expose)}
    prefixes = (*(f"{u.id}{sep}" for u in expose.upstreams for sep in SEPARATORS),
                *(f"{PROMPT_PREFIX}{u.id}_" for u in expose.upstreams),
                *((RESOURCE_PREFIX,) if expose.upstreams else ()))
    for key in state.entries:
        if key not in names and not key.startswith(prefixes):
            found.warnings.append(ConfigProblem(STATE_FILE, f"names no tool{_nearest(key, names)}; the "
                                                "switch has no effect", repr(key)))
    hook_ids = [h.id for h in manifest.hooks]
    for key in hook_overlay:
        if key not in hook_ids:
            found.warnings.append(ConfigProblem(HOOK_STATE_FILE, f"names no hook{_nearest(key, hook_ids)}; "
                                                "the switch has no effect", repr(key)))
    return found


def former_name_findings(expose: ExposeConfig, state: ToolState, manifest: HookManifest) -> Findings:
    """State keys and tool-hook matchers that name an upstream tool by the `<upstream>_<tool>` form it
    had before `namePrefix: "auto"` shortened it (`git_git_status`, now `git_status`). They still
    apply to the tool (the gate and visibility heed the former name too), so a warning with the fix."""
    found = Findings()
    if expose.name_prefix == "always":
        return found

    def shortened(name: str) -> str | None:
        for upstream in expose.upstreams:
            rest = name.removeprefix(f"{upstream.id}_")
            if rest != name and short_name(upstream.id, rest) is not None:
                return rest
        return None

    fix = ('; it still applies, but rename it to {new!r} (`tfunnel expose name-prefix auto` rewrites '
           f'them all), or keep the long names with `tfunnel expose name-prefix always` ({EXPOSE_FILE} '
           '"namePrefix")')
    for key in state.entries:
        new = shortened(key)
        if new is not None:
            found.warnings.append(ConfigProblem(STATE_FILE, f"names {key!r}, the former name of {new!r}"
                                                + fix.format(new=new), repr(key)))
    for hook in manifest.hooks:
        tool_hook = hook.event in ("PreToolUse", "PostToolUse")
        new = shortened(hook.matcher.replace("\\", "")) if tool_hook else None  # as re.escape wrote it
        if new is not None:
            found.warnings.append(ConfigProblem(MANIFEST_FILE, f"matcher {hook.matcher!r} names the former "
                                                f"name of {new!r}" + fix.format(new=new), repr(hook.id),
                                                "matcher"))
    return found


def _nearest(name: str, known: Iterable[str]) -> str:
    near = difflib.get_close_matches(name, sorted(known), n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


def all_findings(groups: Iterable[Findings]) -> Findings:
    found = Findings()
    for group in groups:
        found.extend(group)
    return found
