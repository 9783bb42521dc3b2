"""ToolFunnel's management entries: which register entries are its `tf_*` scripts (pure).

A ToolFunnel register lists its management functions as script tools (`tf_list` runs
`scripts/tf-list.js`, relative to `tools/`, as ToolFunnel writes it: tests/field/toolfunnel-0.6;
`tools/scripts/tf-list.js`, from the home, is the same file), and those scripts drive ToolFunnel's
own engine, which a tfunnel home does not have. The loader serves such an entry with tfunnel's
built-in of the same name instead (the file is left as it is). Recognition asks for both halves
of ToolFunnel's naming, so an operator's own tool that merely starts with `tf_`, or runs a script
of another name or place, stays the script tool it says it is.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from tfunnel.config.model import Invoke

# Where ToolFunnel's management scripts are, in the two spellings of one place: relative to
# `tools/` (what ToolFunnel writes) and relative to the home.
_SCRIPTS = (("scripts",), ("tools", "scripts"))


def toolfunnel_management(entry_id: str, invoke: Invoke | None) -> str | None:
    """The management name (`tf_x`) when the entry is ToolFunnel's: id `tf_x` and a script invoke
    of `scripts/tf-x.js` or `tools/scripts/tf-x.js` (a leading `./` allowed); None for anything else."""
    if invoke is None or invoke.type != "script" or not entry_id.startswith("tf_") or len(entry_id) < 4:
        return None
    if "\\" in invoke.target or invoke.target != invoke.target.strip():
        return None
    parts = tuple(part for part in PurePosixPath(invoke.target).parts if part != ".")
    script = entry_id.replace("_", "-") + ".js"
    return entry_id if any(parts == (*folder, script) for folder in _SCRIPTS) else None


def served_note(entry_id: str, path: str) -> str:
    """The one line a start logs (and `tfunnel check` shows as a note) for an adopted entry."""
    return (f"register entry {entry_id} runs ToolFunnel's {path}; "
            f"serving tfunnel's built-in {entry_id} instead")


def unserved_warning(entry_id: str, path: str) -> str:
    """An entry of ToolFunnel's that tfunnel has no built-in for: it stays a script tool."""
    return (f"register entry {entry_id} runs ToolFunnel's {path}, and tfunnel has no built-in "
            f"{entry_id}: it stays a script tool, which needs ToolFunnel's engine to run")
