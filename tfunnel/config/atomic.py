"""The one atomic-write helper: every file tfunnel writes goes through `write_atomic`.

A temp file in the same folder, fsync, rename, fsync of the folder: a crash leaves the old or
the new file, never a torn one. Temp files carry a recognisable name so a later start can
sweep the ones a crash left behind.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

import orjson

TEMP_SUFFIX = ".tfunnel-tmp"


def write_atomic(path: Path, data: bytes, *, mode: int | None = None, replace: bool = True) -> bool:
    """Replace `path` with `data` atomically (same-folder temp file, fsync, rename). `mode`: the
    new file's permissions from its first byte (else the replaced file's, else the umask's).
    `replace=False` never replaces an existing file: False when one was there (it stays)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else mode)
        with open(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)  # whatever the umask took away
        elif path.exists():
            # Keep the mode of the file being replaced (a hand-edited 0600 stays 0600).
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # fails when the name exists
            except FileExistsError:
                return False
            finally:
                tmp.unlink(missing_ok=True)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return True


def write_json_atomic(path: Path, value: Any, *, finite: bool = False) -> None:
    """Write `value` as indented JSON with a trailing newline, atomically. With `finite` the caller
    vouches that `value` holds no NaN or infinity (documents tfunnel builds itself, such as the
    approvals book and the tool listing): it is encoded by orjson, ten times faster on a large
    document, which would write those as null. Otherwise the standard library, which writes what
    it read (an operator's `Infinity` stays `Infinity`)."""
    data: bytes | None = None
    if finite:
        try:
            data = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
        except (TypeError, orjson.JSONEncodeError):
            data = None
    if data is None:
        data = (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode()
    write_atomic(path, data)


def sweep_temp_files(root: Path) -> list[Path]:
    """Remove temp files an interrupted write left under `root`; return what was removed."""
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for tmp in root.rglob(f"*{TEMP_SUFFIX}"):
        if tmp.is_file():
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed
