"""The audit log: one JSON line per event, appended to `logs/…` under the home, size-rotated.

Configured by `logs/log.config.json` (all fields optional)::

    {"enabled": false, "path": "logs/toolfunnel.log.jsonl", "maxBytes": 10485760, "backups": 3,
     "logArgs": false}

A relative `path` is taken against the home. A missing file means off. At start a malformed one (bad
JSON, a wrong-typed field) also means off, loudly (SPEC §2: "on error: disabled"; `/health` shows the
error), and its problems (`ConfigProblem`, naming file and field) go to `tfunnel check`. While running,
a file that breaks never switches the log off: the gateway re-reads it through `config.files.LiveFiles`
(`LOG_CONFIG`), which keeps the last good config in force, and hands a valid new one to `apply`.
An unknown field is a warning.

Every record is `{"ts": "<UTC, ISO-8601, milliseconds>Z", "type": <kind>, ...fields}` on one line.
Records the gateway writes (SPEC §11):

- `gate`    `tool`, `decision`, `reason`, `hook`                     a PreToolUse decision
- `tool`    `name`, `mode`, `ok`, `durationMs`                       a tool run
- `client`  `event` (`connect` | `end`), `session`, `client`, `protocolVersion`   a client session
  (`connect` is ToolFunnel's name for its start)
- `config`  `file`, `via`, `change`, `by`                           a config change; `via` is
  `cli`, `tf` (in-band, `by` the session), `ui`, or `file` (a running gateway read the file)
- `mcp`     `event`, `upstream`, ...: upstream lifecycle in ToolFunnel's shapes (`connect`,
  `connect_failed`, `disconnect`, `reconnect`, `reconnect_failed`, `stopped`, `reload`,
  `name_collision`; `upstream/lifecycle.py` decides them, `app.py` writes them); and `auth` for
  authorization denials.

Arguments and results are not logged unless `logArgs` is true: write `args=audit.redact(args)`.

Error contract: `record` never raises. A failed write (disk full, permissions) logs one warning to
stderr through structlog (and no more until a write succeeds again); the record is dropped.
"""

from __future__ import annotations

import fcntl
import os
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from tfunnel.config.files import ConfigFile, read_config
from tfunnel.config.validate import Fields
from tfunnel.errors import ConfigProblem

log = structlog.get_logger("tfunnel.audit")

CONFIG_FILE = "logs/log.config.json"
DEFAULT_PATH = "logs/toolfunnel.log.jsonl"
DEFAULTS: dict[str, Any] = {
    "enabled": False, "path": DEFAULT_PATH, "maxBytes": 10 * 1024 * 1024, "backups": 3, "logArgs": False,
}
REDACTED = "[redacted]"
MAX_BYTES_LIMIT = 10**12
MAX_BACKUPS = 100
_RESERVED = ("ts", "type")  # a caller's field never overrides these


@dataclass(frozen=True)
class LogConfig:
    """The validated `log.config.json`; `path` is resolved against the home."""

    enabled: bool
    path: Path
    max_bytes: int
    backups: int
    log_args: bool


def load_log_config(home: Path) -> tuple[LogConfig, list[ConfigProblem], dict[str, Any]]:
    """Read `logs/log.config.json` as a start does: (config, problems, raw object). Any problem → off.

    The raw object is `{}` when the file is missing or not a JSON object; it carries unknown keys
    verbatim for a caller that rewrites the file.
    """
    reading = read_config(home, LOG_CONFIG)
    raw = reading.document if isinstance(reading.document, dict) else {}
    return reading.start_value(), list(reading.problems), raw


def _off(home: Path) -> LogConfig:
    return LogConfig(False, home / DEFAULT_PATH, DEFAULTS["maxBytes"], DEFAULTS["backups"], False)


def _log_config(home: Path, raw: dict[str, Any], f: Fields) -> LogConfig:
    f.known(raw, None, tuple(DEFAULTS))
    enabled = f.boolean(raw, "enabled")
    log_path = Path(f.string(raw, "path", non_empty=True, default=DEFAULT_PATH))
    return LogConfig(
        enabled=bool(enabled),
        path=log_path if log_path.is_absolute() else home / log_path,
        max_bytes=f.integer(raw, "maxBytes", None, 1, MAX_BYTES_LIMIT, DEFAULTS["maxBytes"]),
        backups=f.integer(raw, "backups", None, 0, MAX_BACKUPS, DEFAULTS["backups"]),
        log_args=bool(f.boolean(raw, "logArgs")),
    )


LOG_CONFIG: ConfigFile[LogConfig] = ConfigFile(CONFIG_FILE, "log config", _log_config, absent=_off,
                                               start_fallback="the audit log is off until it is fixed")


def _timestamp(_logger: WrappedLogger, _method: str, event: EventDict) -> EventDict:
    """Put `ts` first: UTC, ISO-8601, milliseconds, `Z` (TimeStamper only offers microseconds)."""
    ts = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {"ts": ts, **event}


# JSON without indent escapes every control character, so a record is always exactly one line;
# values JSON cannot encode are rendered with repr() by the JSONRenderer's fallback.
_PROCESSORS: tuple[Processor, ...] = (_timestamp, structlog.processors.JSONRenderer())


def render(kind: str, fields: dict[str, Any]) -> str:
    """One record as a single JSON line (no trailing newline)."""
    event: Any = {"type": kind, **{k: v for k, v in fields.items() if k not in _RESERVED}}
    for processor in _PROCESSORS:
        event = processor(None, "audit", event)
    assert isinstance(event, str)
    return event


class AuditLog:
    """The home's audit log. `record()` is a synchronous small append."""

    config: LogConfig
    problems: list[ConfigProblem]  # of the start read; empty when the config is valid or missing

    def __init__(self, home: Path, config: LogConfig | None = None) -> None:
        """Use `config`, or read `logs/log.config.json` as a start does (a broken file → off)."""
        self.home = home
        self.problems = []
        if config is None:
            config, self.problems, _raw = load_log_config(home)
        self.apply(config)

    def apply(self, config: LogConfig) -> None:
        """Switch to a new (validated) config: the gateway's live reload calls this."""
        self.config = config
        self._failing = False

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    @property
    def path(self) -> Path:
        return self.config.path

    @property
    def log_args(self) -> bool:
        return self.config.log_args

    def redact(self, value: Any) -> Any:
        """`value` when `logArgs` is on, else the string "[redacted]"."""
        return value if self.config.log_args else REDACTED

    def record(self, kind: str, **fields: Any) -> None:
        """Append one `{"ts", "type": kind, ...fields}` line when enabled; never raises."""
        if not self.config.enabled:
            return
        try:
            data = (render(kind, fields) + "\n").encode("utf-8", errors="backslashreplace")
            self._append(data)
        except (OSError, ValueError, TypeError) as exc:
            if not self._failing:
                log.warning("audit log write failed; records are dropped until a write succeeds",
                            path=str(self.config.path), error=str(exc))
            self._failing = True
        else:
            self._failing = False

    def _append(self, data: bytes) -> None:
        path = self.config.path
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            st = path.stat()
        except FileNotFoundError:
            pass
        else:  # only a regular file rotates (never a directory, nor a path like /dev/stderr)
            if stat.S_ISREG(st.st_mode) and st.st_size >= self.config.max_bytes:
                self._rotate_once(path)
        # One O_APPEND write per record: a plain append, no fsync (this is a log, not a config file).
        # 0o600 because with logArgs on a record may carry secrets.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)

    def _rotate_once(self, path: Path) -> None:
        """Rotate under a lock beside the log, if the file is still over the size then: gateways
        of one home (instances behind a proxy) share the log, and two rotating at once would
        move one's fresh file away as a backup, or fail on a file the other just moved."""
        try:
            lock = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:  # no lock to be had (a folder in its place, say): rotate as one process would
            self._rotate()
            return
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                st = path.stat()
            except FileNotFoundError:
                return
            if st.st_size >= self.config.max_bytes:
                self._rotate()
        finally:
            os.close(lock)  # closing releases the lock

    def _rotate(self) -> None:
        """path → path.1 → … → path.N (N = backups; the oldest falls off); backups 0 → drop it."""
        path, backups = self.config.path, self.config.backups
        if backups == 0:
            path.unlink(missing_ok=True)
            return
        for i in range(backups - 1, 0, -1):
            older = path.with_name(f"{path.name}.{i}")
            if older.exists():
                os.replace(older, path.with_name(f"{path.name}.{i + 1}"))
        os.replace(path, path.with_name(f"{path.name}.1"))
