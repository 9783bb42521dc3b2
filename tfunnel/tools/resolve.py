"""Turn a register `invoke` into an argv: path guard for scripts, interpreter choice."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from tfunnel.config.load import SCRIPTS_DIR
from tfunnel.config.model import Invoke
from tfunnel.errors import ToolFailure

# Interpreters by extension when a script has no shebang line.
_BY_EXTENSION: dict[str, list[str]] = {
    ".py": [sys.executable],
    ".js": ["node"],
    ".mjs": ["node"],
    ".cjs": ["node"],
    ".sh": ["bash"],
}
_SHEBANG_READ = 256


class ScriptNotRunnable(ToolFailure):
    """The script of a `script` invoke is missing, outside `tools/scripts/`, or not runnable."""


def resolve_script(home: Path, path: str) -> Path:
    """The script file for `path`, which must resolve inside `<home>/tools/scripts/`.

    Accepted spellings, first match wins: relative to the home (`tools/scripts/x.py`), relative
    to the scripts folder (`x.py`), and ToolFunnel's rule of the bare file name.
    """
    scripts = (home / SCRIPTS_DIR).resolve()
    raw = Path(path)
    candidates = [raw] if raw.is_absolute() else [home / raw, scripts / raw, scripts / raw.name]
    outside: Path | None = None
    for candidate in candidates:
        try:
            real = candidate.resolve()
            if not real.is_relative_to(scripts):
                outside = outside or real
                continue
            if real.is_file():
                return real
        except (OSError, ValueError) as exc:  # a NUL byte, a name too long, a loop, ...
            raise ScriptNotRunnable(f"script {path!r} is not a usable path: {_reason(exc)}") from exc
    if outside is not None and raw.is_absolute():
        raise ScriptNotRunnable(f"script {path!r} resolves outside {SCRIPTS_DIR}/ ({outside})")
    raise ScriptNotRunnable(f"script {path!r} not found in {scripts}")


def _reason(exc: OSError | ValueError) -> str:
    return (exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc)


def script_argv(script: Path) -> list[str]:
    """Interpreter by shebang, else by extension, else the file itself if executable."""
    try:
        with open(script, "rb") as fh:
            head = fh.read(_SHEBANG_READ)
    except OSError as exc:
        raise ScriptNotRunnable(f"script {script.name!r} cannot be read: {_reason(exc)}") from exc
    if head.startswith(b"#!"):
        line = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise ScriptNotRunnable(f"script {script.name!r} has a malformed shebang line: {exc}") from exc
        if words:
            return [*words, str(script)]
    interpreter = _BY_EXTENSION.get(script.suffix.lower())
    if interpreter is not None:
        return [*interpreter, str(script)]
    if os.access(script, os.X_OK):
        return [str(script)]
    raise ScriptNotRunnable(
        f"script {script.name!r} has no shebang line, no known extension "
        f"({', '.join(sorted(_BY_EXTENSION))}) and is not executable"
    )


def invoke_argv(home: Path, invoke: Invoke) -> list[str]:
    """The argv that runs `invoke`: a script through its interpreter, a shell line via /bin/sh."""
    if invoke.type == "shell":
        return ["/bin/sh", "-c", invoke.target]
    if invoke.type == "builtin":  # never a process: the surface runs it in-process
        raise ToolFailure(f"management tool {invoke.target!r} runs in-process, not as a child")
    return script_argv(resolve_script(home, invoke.target))
