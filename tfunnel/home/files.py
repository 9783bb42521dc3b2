"""Every config file of a home, read by the one rule (`config.files`): what `tfunnel check` reports
and what `serve` starts with come from the same `read_home`, so they agree on what is an error
and what is a warning."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from tfunnel.approvals.book import APPROVALS
from tfunnel.auth.config import AUTH
from tfunnel.config.expose import EXPOSE
from tfunnel.config.files import ConfigFile, Reading, read_config
from tfunnel.config.load import REGISTER, SETTINGS, STATE
from tfunnel.errors import ConfigError, ConfigProblem
from tfunnel.gate.manifest import HOOK_STATE, MANIFEST
from tfunnel.observe.audit import LOG_CONFIG

T = TypeVar("T")

# In the order of SPEC §2's table (and of `tfunnel check`'s report).
HOME_FILES: tuple[ConfigFile[Any], ...] = (SETTINGS, REGISTER, STATE, EXPOSE, APPROVALS, MANIFEST,
                                          HOOK_STATE, LOG_CONFIG, AUTH)


@dataclass(frozen=True)
class HomeReading:
    """One reading of each file of `HOME_FILES`."""

    home: Path
    readings: tuple[Reading[Any], ...]

    def get(self, spec: ConfigFile[T]) -> Reading[T]:
        return cast(Reading[T], next(r for r in self.readings if r.file.name == spec.name))

    def value(self, spec: ConfigFile[T]) -> T:
        """The value a start uses for `spec`; raises `ConfigError` if that file refuses the start."""
        return self.get(spec).start_value()

    @property
    def problems(self) -> list[ConfigProblem]:
        """Every error of every file, also those that do not refuse a start (the log config)."""
        return [p for r in self.readings for p in r.problems]

    @property
    def warnings(self) -> list[ConfigProblem]:
        """Every warning (unknown field) of every file."""
        return [w for r in self.readings for w in r.warnings]

    def refuse_start(self) -> None:
        """Raise `ConfigError` naming every problem of every file that refuses a start."""
        fatal = [p for r in self.readings if r.value is None for p in r.problems]
        if fatal:
            raise ConfigError(fatal)


def read_home(home: Path) -> HomeReading:
    """Read every config file of `home`; never raises for bad content (see `HomeReading`)."""
    return HomeReading(home, tuple(read_config(home, spec) for spec in HOME_FILES))
