"""`tfunnel check`: every problem and warning in a home, all at once.

Each check is a producer in `CHECKS`: it gets the home's `HomeReading` (every file read by the same
rule a start uses) and yields `ConfigProblem`s, errors and warnings (`severity`): first each file's
own, then what serving it would hit (`runtime`). A new check is one more producer appended there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from fnmatch import fnmatchcase
from pathlib import Path

from tfunnel.config.expose import EXPOSE
from tfunnel.config.home import child_environment
from tfunnel.config.load import REGISTER, SETTINGS, STATE
from tfunnel.errors import ConfigProblem
from tfunnel.gate.manifest import HOOK_STATE, MANIFEST, with_overlay
from tfunnel.home import preflight
from tfunnel.home import state_key as state_key_file
from tfunnel.home.files import HomeReading, read_home

Check = Callable[[HomeReading], Iterable[ConfigProblem]]


def files(reading: HomeReading) -> Iterator[ConfigProblem]:
    """Each file's errors, then its warnings (unknown fields), in `HOME_FILES` order."""
    for file in reading.readings:
        yield from file.problems
        yield from file.warnings


def runtime(reading: HomeReading, env: Mapping[str, str] | None = None) -> Iterator[ConfigProblem]:
    """What serving the home would hit though its files are valid (`tfunnel.home.preflight`): upstreams
    that cannot start, hooks and script tools that cannot run, colliding names. `serve` logs the
    same findings at start."""
    home = reading.home
    env = child_environment(home) if env is None else env
    register, expose = reading.get(REGISTER).value, reading.get(EXPOSE).value
    manifest, overlay = reading.get(MANIFEST).value, reading.get(HOOK_STATE).value
    groups: list[preflight.Findings] = []
    if expose is not None:
        groups.append(preflight.upstream_findings(expose, home, env))
    if manifest is not None:
        groups.append(preflight.hook_findings(with_overlay(manifest, overlay or {}), home, env))
    if register is not None:
        groups.append(preflight.register_findings(register, home))
        if expose is not None:
            groups.append(preflight.name_findings(register, expose))
            state = reading.get(STATE).value
            if state is not None and manifest is not None and overlay is not None:
                groups.append(preflight.overlay_findings(register, expose, state, manifest, overlay))
                groups.append(preflight.former_name_findings(expose, state, manifest))
    yield from preflight.all_findings(groups).all()


def wrap(reading: HomeReading) -> Iterator[ConfigProblem]:
    """A wrap (`passthrough` in tools.state.json) of an upstream that is not configured or is
    disabled: the wrapped surface would be empty (an error: every client would see no tools)."""
    state, expose = reading.get(STATE).value, reading.get(EXPOSE).value
    if state is None or expose is None or state.passthrough is None:
        return
    spec = expose.upstream(state.passthrough)
    why = f"{EXPOSE.name} has no upstream {state.passthrough!r}" if spec is None \
        else f"upstream {state.passthrough!r} is disabled in {EXPOSE.name}" if not spec.enabled else None
    if why is not None:
        yield ConfigProblem(STATE.name, f"wraps upstream {state.passthrough!r}, but {why}: clients would "
                            "see an empty surface; clear the wrap with `tfunnel wrap --off`", None,
                            "passthrough")


def profiles(reading: HomeReading) -> Iterator[ConfigProblem]:
    """A profile's `upstreams` pattern that names no configured upstream: likely a typo, which
    leaves that profile's clients without the upstream (a warning: nothing widens)."""
    settings, expose = reading.get(SETTINGS).value, reading.get(EXPOSE).value
    if settings is None or expose is None:
        return
    ids = [spec.id for spec in expose.upstreams]
    for index, profile in enumerate(settings.profiles):
        for pattern in profile.upstreams or ():
            if not any(fnmatchcase(uid, pattern) for uid in ids):
                yield ConfigProblem(SETTINGS.name, f"{pattern!r} matches no upstream in {EXPOSE.name} "
                                    f"(configured: {', '.join(ids) or 'none'})",
                                    f"profiles[{index}] ({profile.name!r})", "upstreams", "warning")


def state_key(reading: HomeReading) -> Iterator[ConfigProblem]:
    """A `stateKeyFile` that a start would refuse (unreadable, too short, open to others)."""
    settings = reading.get(SETTINGS).value
    if settings is not None and settings.state_key_file is not None:
        yield from state_key_file.check(reading.home, settings.state_key_file)


CHECKS: tuple[Check, ...] = (files, runtime, wrap, profiles, state_key)


def check_home(home: Path) -> list[ConfigProblem]:
    """Every problem and warning of `home` (see `ConfigProblem.severity`), from every check."""
    reading = read_home(home)
    return [problem for check in CHECKS for problem in check(reading)]
