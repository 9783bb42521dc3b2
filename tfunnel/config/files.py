"""One rule for reading a config file, at start and while running (SPEC §2 "never fail open").

Every file of a home is described by a `ConfigFile`: its name, a parser that validates the parsed
document (recording problems and unknown-field warnings in a `Fields`), and what its absence means.
`read_config` classifies one read as `valid`, `missing`, `unreadable` or `malformed` (bad JSON, an
empty or cut-off file, a wrong top level, or any invalid entry: one bad entry makes the whole file
malformed). At start, `Reading.start_value` turns a reading into a value or a `ConfigError`.

While running, `LiveFiles.reread` is the only way a live file's new version replaces the one in
force: a valid file replaces it; a missing, unreadable or malformed one leaves the last good
version in force and records an error keyed by the file (for `/health`). A missing file counts as
"cleared" only if the version in force did not come from a file either (SIGHUP on a home that never
had a state file changes nothing); to clear a file, an operator writes an empty document (`{}`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

import structlog

from tfunnel.config.validate import Fields, Malformed, Missing, Unreadable, read_json
from tfunnel.errors import ConfigError, ConfigProblem

T = TypeVar("T")
Kind = Literal["valid", "missing", "unreadable", "malformed"]
Parse = Callable[[Path, dict[str, Any], Fields], T]

log = structlog.get_logger("tfunnel.config")


@dataclass(frozen=True)
class ConfigFile(Generic[T]):
    """One kind of config file.

    `label` names it in log lines ("register", "hook manifest"). `parse(home, document, fields)`
    validates a top-level object, recording every problem and warning in `fields`. `absent(home)`
    is the value of a file that does not exist (None: the file is required). `start_fallback` set
    means a broken file does not refuse the start: the absent value is used and the text says what
    that means ("the audit log is off")."""

    name: str
    label: str
    parse: Parse[T]
    absent: Callable[[Path], T] | None = None
    missing_hint: str = ""
    start_fallback: str | None = None


@dataclass(frozen=True)
class Reading(Generic[T]):
    """One read of one file. `value` is what a start uses (None: the start is refused);
    `document` is the parsed JSON (for writers that keep unknown fields), when it parsed."""

    file: ConfigFile[T]
    kind: Kind
    value: T | None
    problems: tuple[ConfigProblem, ...] = ()
    warnings: tuple[ConfigProblem, ...] = ()
    document: Any = None

    def start_value(self) -> T:
        """The value to start with; raise `ConfigError` naming every problem if there is none."""
        if self.value is None:
            raise ConfigError(list(self.problems))
        return self.value


def read_config(home: Path, spec: ConfigFile[T]) -> Reading[T]:
    """Read and validate `home / spec.name`, classifying the outcome; never raises for bad content."""
    problems: list[ConfigProblem] = []
    warnings: list[ConfigProblem] = []
    fields = Fields(spec.name, problems, warnings)
    fallback = spec.absent(home) if spec.absent is not None and spec.start_fallback else None
    try:
        document = read_json(home / spec.name, spec.name)
    except Missing:
        if spec.absent is not None:
            return Reading(spec, "missing", spec.absent(home))
        return Reading(spec, "missing", None, (ConfigProblem(spec.name, f"is missing{spec.missing_hint}"),))
    except Unreadable as exc:
        return Reading(spec, "unreadable", fallback, (ConfigProblem(spec.name, str(exc)),))
    except Malformed as exc:
        return Reading(spec, "malformed", fallback, (ConfigProblem(spec.name, str(exc)),))
    if not isinstance(document, dict):
        fields.problem("must contain a JSON object at the top level")
        return Reading(spec, "malformed", fallback, tuple(problems), document=document)
    for entry, where in nul_characters(document):
        # One rule for every file: a NUL cannot be part of a path, a command line or an environment,
        # and would fail far from here (at exec, or inside `check`); refuse it where it is written.
        fields.problem("contains a NUL character (U+0000), which no config value may hold", entry, where)
    if problems:
        return Reading(spec, "malformed", fallback, tuple(problems), document=document)
    value = spec.parse(home, document, fields)
    if problems:
        return Reading(spec, "malformed", fallback, tuple(problems), tuple(warnings), document)
    return Reading(spec, "valid", value, (), tuple(warnings), document)


def nul_characters(document: Any) -> list[tuple[str | None, str]]:
    """Where `document` holds a NUL character in a key or a string: (entry, field) pairs, the
    entry naming a top-level array's element (with its id when it has one)."""
    found: list[tuple[str | None, str]] = []

    def walk(value: Any, path: str, entry: str | None) -> None:
        if isinstance(value, str):
            if "\0" in value:
                found.append((entry, path or "(value)"))
        elif isinstance(value, dict):
            for key, item in value.items():
                step = f"{path}.{key}" if path else key
                if "\0" in key:
                    found.append((entry, (f"{path}." if path else "") + repr(key)))
                walk(item, step, entry)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, f"{path}[{index}]", entry)

    for key, value in document.items():
        if "\0" in key:
            found.append((None, repr(key)))
        if isinstance(value, list):
            for index, item in enumerate(value):
                ident = item.get("id") if isinstance(item, dict) else None
                label = f"{key}[{index}]" + (f" (id {ident!r})" if isinstance(ident, str) else "")
                walk(item, "", label)
        else:
            walk(value, key, None)
    return found


def load(home: Path, spec: ConfigFile[T]) -> T:
    """The file's value as a start sees it; raise `ConfigError` naming every problem."""
    return read_config(home, spec).start_value()


def _text(problems: Iterable[ConfigProblem]) -> str:
    return "; ".join(str(p) for p in problems)


class LiveFiles:
    """The running gateway's view of its config files: the errors (keyed by file) of versions that
    were refused, the warnings of the versions in force, and the rule for replacing a version.

    Warnings are logged once each, when they first appear (at start or with the reload that brought
    them); a file whose warnings did not change logs nothing again."""

    def __init__(self, home: Path, start: Iterable[Reading[Any]] = ()) -> None:
        self.home = home
        self.errors: dict[str, str] = {}
        self._warnings: dict[str, tuple[ConfigProblem, ...]] = {}
        self._from_file: dict[str, bool] = {}
        for reading in start:
            self._start(reading)

    def _start(self, reading: Reading[Any]) -> None:
        name = reading.file.name
        self._from_file[name] = reading.kind == "valid"
        self._in_force(name, reading.warnings)
        if reading.problems and reading.value is not None:  # a broken file that does not refuse start
            fallback = reading.file.start_fallback
            self.errors[name] = f"{_text(reading.problems)} ({fallback})"
            log.error(f"{reading.file.label} broken at start", file=name, kind=reading.kind,
                      error=_text(reading.problems), consequence=fallback)

    def reread(self, spec: ConfigFile[T]) -> T | None:
        """The file's new version when it is valid (its error cleared), else None: the last good
        version stays in force and the error (missing, unreadable, malformed) is recorded."""
        return self.judge(read_config(self.home, spec))

    def judge(self, reading: Reading[T]) -> T | None:
        """`reread` for a reading already made (by a writer that read the file under its lock)."""
        name = reading.file.name
        if reading.kind == "missing" and reading.value is not None and not self._from_file.get(name):
            return self._accept(reading, reading.value)  # absent before and absent now: nothing changed
        if reading.kind != "valid" or reading.value is None:
            problems = reading.problems
            if reading.kind == "missing":
                problems = (ConfigProblem(name, "is missing (deleted while running); to clear it, "
                                                "write an empty document such as {}"),)
            self.errors[name] = f"{_text(problems)} (reload refused; the last good version stays in force)"
            log.error(f"{reading.file.label} reload refused; the last good version stays in force", file=name,
                      kind=reading.kind, error=_text(problems))
            return None
        self._from_file[name] = True
        return self._accept(reading, reading.value)

    def _accept(self, reading: Reading[T], value: T) -> T:
        if self.errors.pop(reading.file.name, None) is not None:
            log.info(f"{reading.file.label} valid again; its error is cleared", file=reading.file.name)
        self._in_force(reading.file.name, reading.warnings)
        return value

    def _in_force(self, name: str, warnings: tuple[ConfigProblem, ...]) -> None:
        before = {str(w) for w in self._warnings.get(name, ())}
        for warning in warnings:
            if str(warning) not in before:
                if warning.severity == "note":
                    log.info("config note", file=name, note=warning.message)
                else:
                    log.warning("config warning", file=name, warning=str(warning))
        self._warnings[name] = warnings

    def warnings(self) -> list[ConfigProblem]:
        """The warnings of every version in force, sorted by file (in file order within one); notes
        are logged once, not kept as warnings."""
        return [w for name in sorted(self._warnings) for w in self._warnings[name] if w.severity != "note"]
