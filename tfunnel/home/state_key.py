"""The `requestState` key that instances behind one proxy share (`toolfunnel.json` `stateKeyFile`).

A modern client's MRTR retry may land on another instance than the one that sealed its
`requestState`; with one key file for all of them, any instance opens what any other sealed.

The file is the key: its bytes, 32 to 4096 of them, readable by its owner only (mode 0600; a key
others can read is refused, naming the mode). A missing file is created at start (32 random bytes,
mode 0600, written whole before it appears: two instances starting together end up with one key).
`tfunnel state-key rotate` (`rotate`) keeps the retiring key in `<file>.previous` and writes a new
one; each instance seals with the new key as soon as it sees it and opens with the previous one
until its expiry window has passed since the rotation (the `.previous` file's mtime), so no token
sealed before the rotation is refused while it is still valid.

`KeyFile` is the `mrtr.KeySource` the gateway seals with: it looks at the files' signatures at most
once per `LOOK_EVERY_S` (and at once when a token opens with no key it has, `refresh`), reads them
only when they changed, and keeps the last good ring when they become unreadable or invalid (an
editor's half-written file never leaves an instance without a key).
"""

from __future__ import annotations

import os
import secrets
import stat
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from tfunnel.config.atomic import write_atomic
from tfunnel.errors import ConfigError, ConfigProblem
from tfunnel.protocol.mrtr import DEFAULT_TTL_S, KeyRing

log = structlog.get_logger("tfunnel.state_key")

KEY_BYTES = 32
MIN_BYTES = 32
MAX_BYTES = 4096
PREVIOUS_SUFFIX = ".previous"
LOOK_EVERY_S = 1.0
# A rotated-out key is accepted this much longer than the tokens' lifetime: an instance may seal
# with it until it next looks at the file (a second), and clocks are read at different moments.
SLACK_S = 60.0
SETTING = "stateKeyFile"

_Signature = tuple[int, int, int] | None


class StateKeyError(ValueError):
    """A key file that cannot be used; the message names the file and what is wrong."""


def resolve(home: Path, value: str) -> Path:
    """The key file named by the setting: a relative path is taken against the home."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else home / path


def ensure(path: Path) -> bytes:
    """The key in `path`, created first (32 random bytes, mode 0600) when there is none.
    Raises `StateKeyError` for a file that cannot be the key."""
    if not path.exists() and not path.is_symlink():
        _create(path)
    return read(path)


def read(path: Path) -> bytes:
    """The key in `path`, checked: a regular file, no access for group or others, 32 to 4096
    bytes. Raises `StateKeyError`."""
    try:
        # Non-blocking: a FIFO put in its place must not hang the start.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise StateKeyError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StateKeyError(f"{path}: is not a regular file")
        if info.st_mode & 0o077:
            mode = stat.S_IMODE(info.st_mode)
            raise StateKeyError(f"{path}: group or others may access it (mode {mode:04o}); "
                                f"a shared key must be its owner's alone: chmod 600 {path}")
        data = os.read(fd, MAX_BYTES + 1)
    except OSError as exc:
        raise StateKeyError(f"{path}: cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if not MIN_BYTES <= len(data) <= MAX_BYTES:
        size = f"{len(data)}{'+' if len(data) > MAX_BYTES else ''}"
        raise StateKeyError(f"{path}: holds {size} bytes; a key file holds {MIN_BYTES} to {MAX_BYTES} "
                            "bytes (e.g. head -c 32 /dev/urandom)")
    return data


def rotate(path: Path) -> None:
    """Retire the key in `path` to `<path>.previous` (written now: its mtime is the rotation's
    time) and put a new random key in its place. Raises `StateKeyError` when the current key is
    unusable (nothing is written then)."""
    current = read(path)
    _write(_previous(path), current)
    _write(path, secrets.token_bytes(KEY_BYTES))


def check(home: Path, value: str) -> list[ConfigProblem]:
    """`tfunnel check`: the problems of the configured key file (a missing one is made at start)."""
    path = resolve(home, value)
    if not path.exists() and not path.is_symlink():
        return []
    try:
        read(path)
    except StateKeyError as exc:
        return [_problem(str(exc))]
    return []


def _problem(message: str) -> ConfigProblem:
    return ConfigProblem("toolfunnel.json", message, field=SETTING)


class KeyFile:
    """The shared key ring, kept current from the key file and its `.previous`."""

    def __init__(self, path: Path, *, ttl_s: float = DEFAULT_TTL_S, wall: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._previous_path = _previous(path)
        self._ttl_s = ttl_s
        self._wall = wall
        self._monotonic = monotonic
        self._signatures: tuple[_Signature, _Signature] = (None, None)
        self._current = b""
        self._previous: tuple[bytes, float] | None = None  # the key and when it was retired
        self._ring = KeyRing(b"", ())
        self._looked = -float("inf")
        self._refused: tuple[_Signature, _Signature] | None = None  # the broken files, said once
        self._load(strict=True)

    @classmethod
    def open(cls, home: Path, value: str, *, ttl_s: float = DEFAULT_TTL_S) -> KeyFile:
        """The key file the setting names, created when missing. Raises `ConfigError` naming
        `toolfunnel.json` `stateKeyFile` and what is wrong: a start never goes on without it."""
        path = resolve(home, value)
        try:
            ensure(path)
            return cls(path, ttl_s=ttl_s)
        except StateKeyError as exc:
            raise ConfigError([_problem(str(exc))]) from None

    def ring(self) -> KeyRing:
        now = self._monotonic()
        if now - self._looked >= LOOK_EVERY_S:
            self._looked = now
            self._load(strict=False)
        return self._expire()

    def refresh(self) -> bool:
        before = self._ring
        self._looked = self._monotonic()
        self._load(strict=False)
        return self._expire() != before

    def _expire(self) -> KeyRing:
        """The ring in force: the previous key leaves it once its window has passed (the one rule)."""
        if self._previous is not None and self._wall() >= self._previous[1] + self._ttl_s + SLACK_S:
            self._previous = None
            self._ring = KeyRing(self._current, (self._current,))
        return self._ring

    def _load(self, *, strict: bool) -> None:
        signatures = (_signature(self.path), _signature(self._previous_path))
        if signatures != self._signatures:
            try:
                current = read(self.path)
            except StateKeyError as exc:
                if strict:
                    raise
                # Keep sealing with the last good key; the next look tries again. Said once per
                # broken file (a forged token makes it look at once: that must not flood the log).
                if self._refused != signatures:
                    self._refused = signatures
                    log.warning("state key file unusable; the last good key stays in force", problem=str(exc))
                return
            previous = self._read_previous(signatures[1], current)
            self._signatures, self._current, self._previous = signatures, current, previous
            log.info("state key loaded", file=str(self.path), previous=previous is not None)
        retired = () if self._previous is None else (self._previous[0],)
        self._ring = KeyRing(self._current, (self._current, *retired))

    def _read_previous(self, signature: _Signature, current: bytes) -> tuple[bytes, float] | None:
        if signature is None:
            return None
        try:
            key = read(self._previous_path)
            retired = self._previous_path.stat().st_mtime
        except (StateKeyError, OSError) as exc:
            log.warning("previous state key unusable; only the current key opens tokens", problem=str(exc))
            return None
        return None if key == current else (key, retired)


def _previous(path: Path) -> Path:
    return path.with_name(path.name + PREVIOUS_SUFFIX)


def _signature(path: Path) -> _Signature:
    try:
        info = path.stat()
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def _create(path: Path) -> None:
    """A new key at `path`, complete before it appears; when another process made one first
    (two instances starting together), theirs stays."""
    try:
        write_atomic(path, secrets.token_bytes(KEY_BYTES), mode=0o600, replace=False)
    except OSError as exc:
        raise StateKeyError(f"{path}: cannot be created ({exc.strerror or exc})") from None


def _write(path: Path, data: bytes) -> None:
    try:
        write_atomic(path, data, mode=0o600)
    except OSError as exc:
        raise StateKeyError(f"{path}: cannot be written ({exc.strerror or exc})") from None
