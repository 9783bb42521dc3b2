"""How the management subcommands print: a table for people, `--json` for scripts.

The same for every subcommand that runs an operation (`manage.run_cmd`): success prints the
operation's structured result (with `"ok": true`) as JSON, or a headline and a two-column table
of its fields (nested objects flattened to dotted keys); failure prints the operation's message on
stderr (and, with `--json`, `{"ok": false, "error": ...}` on stdout) and exits 1.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from typing import Any


def flatten(value: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """`(dotted key, shown value)` pairs: objects are walked, everything else is compact JSON
    (a string as itself)."""
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, Mapping) and item:
            yield from flatten(item, f"{name}.")
        elif isinstance(item, str):
            yield name, item
        else:
            yield name, json.dumps(item, ensure_ascii=False, separators=(",", ": "))


def table(rows: list[tuple[str, str]]) -> str:
    """Two aligned columns, one row a line."""
    width = max((len(k) for k, _ in rows), default=0)
    return "\n".join(f"  {k:<{width}}  {v}".rstrip() for k, v in rows)


def succeed(result: Mapping[str, Any], headline: str, *, as_json: bool) -> int:
    body = {"ok": True, **result}
    if as_json:
        print(json.dumps(body, indent=2, ensure_ascii=False))
        return 0
    print(headline)
    rows = list(flatten(result))
    if rows:
        print(table(rows))
    return 0


def fail(prefix: str, message: str, *, as_json: bool) -> int:
    print(f"{prefix} {message}", file=sys.stderr)
    if as_json:
        print(json.dumps({"ok": False, "error": message}, indent=2, ensure_ascii=False))
    return 1
