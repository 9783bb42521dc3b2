"""`tfunnel check`: every problem and warning in a home, all at once.

Each check is a producer in `CHECKS`: it gets the home's `HomeReading` (every file read by the same
rule a start uses) and yields `ConfigProblem`s, errors and warnings (`severity`). A new check (a
command not on PATH, a missing hook script, a name collision) is one more producer appended there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from tfunnel.config.expose import EXPOSE, EXPOSE_FILE
from tfunnel.config.load import REGISTER, REGISTER_FILE
from tfunnel.errors import ConfigProblem
from tfunnel.home_files import HomeReading, read_home
from tfunnel.tools.resolve import ScriptNotRunnable, resolve_script, script_argv
from tfunnel.upstream.isolation import isolation_problems

Check = Callable[[HomeReading], Iterable[ConfigProblem]]


def files(reading: HomeReading) -> Iterator[ConfigProblem]:
    """Each file's errors, then its warnings (unknown fields), in `HOME_FILES` order."""
    for file in reading.readings:
        yield from file.problems
        yield from file.warnings


def isolation(reading: HomeReading) -> Iterator[ConfigProblem]:
    """Enabled upstreams the isolation guard would refuse to start."""
    expose = reading.get(EXPOSE).value
    for index, spec in enumerate(expose.upstreams if expose is not None else ()):
        if spec.enabled:
            label = f"upstreams[{index}] (id {spec.id!r})"
            for text in isolation_problems(spec, reading.home):
                yield ConfigProblem(EXPOSE_FILE, f"isolation guard: {text}", label)


def scripts(reading: HomeReading) -> Iterator[ConfigProblem]:
    """Script invokes whose script cannot run (missing, outside the home, no interpreter)."""
    register = reading.get(REGISTER).value
    for index, entry in enumerate(register.tools if register is not None else ()):
        if entry.invoke is not None and entry.invoke.type == "script":
            try:
                script_argv(resolve_script(reading.home, entry.invoke.target))
            except ScriptNotRunnable as exc:
                label = f"tools[{index}] (id {entry.id!r})"
                yield ConfigProblem(REGISTER_FILE, str(exc), label, "invoke.path")


CHECKS: tuple[Check, ...] = (files, isolation, scripts)


def check_home(home: Path) -> list[ConfigProblem]:
    """Every problem and warning of `home` (see `ConfigProblem.severity`), from every check."""
    reading = read_home(home)
    return [problem for check in CHECKS for problem in check(reading)]
