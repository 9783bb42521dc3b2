"""The `requires` entries of `toolfunnel.json`: the programs a home needs, checked at every start.

An entry is `{"command": "node", "versionArg": "--version", "min": "18", "why": "the js tools"}`
(only `command` is needed). The check is advisory: each unmet entry is one line, and nothing is
refused. `verdict` decides from what the probe saw (pure); `probe` looks the command up on `PATH`
and, when `min` is given, runs `command versionArg` (default `--version`) for at most
`PROBE_TIMEOUT_S` and reads the first dotted number of its output. Versions compare numerically
part by part (`18.2` < `18.10`; a missing part counts as 0).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PROBE_TIMEOUT_S = 3.0
_NUMBER = re.compile(r"\d+(?:\.\d+)*")


@dataclass(frozen=True)
class Seen:
    """What the probe found for one entry: the command's path (None: not on PATH) and, when a
    version was asked for, the output of the version command, or why it could not be run."""

    path: str | None
    output: str | None = None
    failure: str | None = None


def version_tuple(text: str) -> tuple[int, ...] | None:
    match = _NUMBER.search(text)
    return tuple(int(part) for part in match.group().split(".")) if match else None


def at_least(found: tuple[int, ...], wanted: tuple[int, ...]) -> bool:
    width = max(len(found), len(wanted))
    return found + (0,) * (width - len(found)) >= wanted + (0,) * (width - len(wanted))


def verdict(index: int, entry: Mapping[str, Any], seen: Seen | None) -> str | None:
    """The one line saying why `requires[index]` is unmet, or None when it is met."""
    command = entry.get("command")
    why = entry.get("why")
    suffix = f" (needed for {why})" if isinstance(why, str) and why.strip() else ""
    if not isinstance(command, str) or not command.strip():
        return f"requires[{index}]: needs a non-empty 'command' string"
    minimum = entry.get("min")
    if minimum is not None and (not isinstance(minimum, str | int | float) or isinstance(minimum, bool)
                                or version_tuple(str(minimum)) is None):
        return f"requires[{index}] ({command}): 'min' must be a version such as \"18\" or \"3.11\""
    if seen is None or seen.path is None:
        return f"requires: {command} not found on PATH{suffix}"
    if minimum is None:
        return None
    wanted = version_tuple(str(minimum))
    assert wanted is not None
    arg = entry.get("versionArg", "--version")
    if seen.failure is not None:
        return f"requires: {command} {arg} failed ({seen.failure}); {minimum} or newer wanted{suffix}"
    found = version_tuple(seen.output or "")
    if found is None:
        return f"requires: no version number in the output of `{command} {arg}`; {minimum} or newer " \
               f"wanted{suffix}"
    if not at_least(found, wanted):
        shown = ".".join(map(str, found))
        return f"requires: {command} {shown} found, {minimum} or newer wanted{suffix}"
    return None


def probe(entry: Mapping[str, Any], path_env: str | None) -> Seen | None:
    """Look `entry`'s command up (and run its version command when `min` is given); None when the
    entry is not well-formed enough to probe."""
    command = entry.get("command")
    if not isinstance(command, str) or not command.strip():
        return None
    found = shutil.which(command, path=path_env)
    if found is None or entry.get("min") is None:
        return Seen(found)
    arg = entry.get("versionArg", "--version")
    argv = [found, *([arg] if isinstance(arg, str) and arg else [])]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL,
                              check=False)
    except subprocess.TimeoutExpired:
        return Seen(found, failure=f"no answer within {PROBE_TIMEOUT_S:g} s")
    except OSError as exc:
        return Seen(found, failure=exc.strerror or str(exc))
    output = (done.stdout + b"\n" + done.stderr).decode("utf-8", "replace")
    return Seen(found, output=output)


def unmet(requires: Sequence[Mapping[str, Any]], path_env: str | None) -> list[str]:
    """One line per unmet entry of `requires`, in order."""
    lines = []
    for index, entry in enumerate(requires):
        line = verdict(index, entry, probe(entry, path_env))
        if line is not None:
            lines.append(line)
    return lines
