"""`tfunnel log on|off|status|tail`: switch the audit log, show its state, print its last records.

Exit status: 0 on success, 1 when `logs/log.config.json` is malformed (the problems go to stderr and
the file is left as it is) or the log file cannot be read, 2 for an unknown action.
"""

from __future__ import annotations

import sys
from collections import deque
from pathlib import Path
from typing import Any

from tfunnel.config.atomic import write_json_atomic
from tfunnel.observe.audit import CONFIG_FILE, DEFAULTS, AuditLog, LogConfig, load_log_config

ACTIONS = ("on", "off", "status", "tail")


def log_command(home: Path, action: str, *, lines: int = 20) -> int:
    """Run one `tfunnel log` action against `home`; return the exit status."""
    if action not in ACTIONS:
        print(f"tfunnel log: unknown action {action!r}; expected one of {', '.join(ACTIONS)}",
              file=sys.stderr)
        return 2
    config, problems, raw = load_log_config(home)
    if action == "status":
        _print_status(config)
    if problems:
        for problem in problems:
            print(f"tfunnel log: {problem}", file=sys.stderr)
        if action in ("on", "off"):
            print(f"tfunnel log: {CONFIG_FILE} left unchanged; fix it first", file=sys.stderr)
        return 1
    if action in ("on", "off"):
        _switch(home, raw, on=action == "on")
    elif action == "tail":
        return _tail(config.path, lines)
    return 0


def _switch(home: Path, raw: dict[str, Any], *, on: bool) -> None:
    change = "on" if on else "off"
    path = home / CONFIG_FILE
    # A missing file is created with every default spelled out; an existing one keeps its other
    # fields and unknown keys verbatim.
    updated = {**(raw if path.exists() else DEFAULTS), "enabled": on}
    if not on:  # record while the log is still on
        AuditLog(home).record("config", file=CONFIG_FILE, via="cli", change=change)
    write_json_atomic(path, updated)
    audit = AuditLog(home)
    if on:
        audit.record("config", file=CONFIG_FILE, via="cli", change=change)
    print(f"audit log: {change} ({audit.path.absolute()})")


def _print_status(config: LogConfig) -> None:
    size, records = _size_and_records(config.path)
    print(f"audit log: {'on' if config.enabled else 'off'}")
    print(f"  path: {config.path.absolute()}")
    print(f"  maxBytes: {config.max_bytes}")
    print(f"  backups: {config.backups}")
    print(f"  logArgs: {str(config.log_args).lower()}")
    print(f"  size: {size} bytes" if size is not None else "  size: (no readable file)")
    print(f"  records: {records}")


def _size_and_records(path: Path) -> tuple[int | None, int]:
    """The current file's size and line count; (None, 0) when it does not exist or is unreadable."""
    try:
        with open(path, "rb") as fh:
            records = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 16), b""))
            return fh.tell(), records
    except OSError:
        return None, 0


def _tail(path: Path, lines: int) -> int:
    """Print the last `lines` records of the current file as they are; nothing if there is none."""
    if lines <= 0:
        return 0
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            last = deque(fh, maxlen=lines)
    except FileNotFoundError:
        return 0
    except OSError as exc:
        print(f"tfunnel log: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    for line in last:
        sys.stdout.write(line if line.endswith("\n") else line + "\n")
    return 0
