"""What is pinned of an upstream item, and its fingerprint (pure).

An item is what an upstream shows the model: a tool, a prompt, a resource template, or the
server's instructions. Only the model-facing fields are pinned (SPEC §6.5): a change to `_meta`,
`icons` or `execution` does not hold a tool, a change to its description or a single annotation
does. The fingerprint is a SHA-256 over the canonical JSON of those fields (sorted keys, no
insignificant whitespace, Unicode kept as is), so two listings that differ only in key order or
formatting are the same item.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["tool", "prompt", "template", "instructions"]
KINDS: tuple[Kind, ...] = ("tool", "prompt", "template", "instructions")
# The upstream list each kind comes from (`upstream.listing` names).
LIST_OF: Mapping[str, Kind] = {"tools": "tool", "prompts": "prompt", "templates": "template"}
# The model-facing fields of each kind: what a client shows the model, or what it acts on.
FIELDS: Mapping[Kind, tuple[str, ...]] = {
    "tool": ("name", "title", "description", "inputSchema", "outputSchema", "annotations"),
    "prompt": ("name", "title", "description", "arguments"),
    "template": ("uriTemplate", "name", "title", "description", "mimeType", "annotations"),
    "instructions": ("instructions",),
}
# The field that names an item of each kind (its key within its upstream).
_NAMED_BY: Mapping[Kind, str] = {"tool": "name", "prompt": "name", "template": "uriTemplate",
                                  "instructions": "instructions"}
# How deep `changed_paths` looks before it names a whole subtree.
_PATH_DEPTH = 4


@dataclass(frozen=True)
class Item:
    """One pinned item of one upstream: its key (`tool:<name>`, `prompt:<name>`,
    `template:<uriTemplate>`, `instructions`), its pinned fields and their fingerprint."""

    key: str
    kind: Kind
    fields: Mapping[str, Any]
    digest: str

    @property
    def name(self) -> str:
        """The item's own name (the part of the key after the kind)."""
        return self.key.partition(":")[2] if self.kind != "instructions" else "instructions"


def digest(fields: Mapping[str, Any]) -> str:
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                           allow_nan=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def item_key(kind: Kind, name: str) -> str:
    return "instructions" if kind == "instructions" else f"{kind}:{name}"


def pinned(kind: Kind, descriptor: Mapping[str, Any]) -> Item | None:
    """The pinned part of one listed descriptor; None when it has no name to pin it by (the
    lister drops such items anyway)."""
    name = descriptor.get(_NAMED_BY[kind])
    if not isinstance(name, str):
        return None
    fields = {f: descriptor[f] for f in FIELDS[kind] if f in descriptor}
    return Item(item_key(kind, name), kind, fields, digest(fields))


def instructions_item(text: str) -> Item | None:
    """The server's instructions as an item; None when it sent none."""
    if not text:
        return None
    fields = {"instructions": text}
    return Item("instructions", "instructions", fields, digest(fields))


def items_of(lists: Mapping[str, Sequence[Mapping[str, Any]]], instructions: str) -> dict[str, Item]:
    """Every pinnable item of one upstream's listing (tools, prompts, templates, instructions),
    by key; a key listed twice keeps its first item (as the surface does)."""
    found: dict[str, Item] = {}
    for list_name, kind in LIST_OF.items():
        for descriptor in lists.get(list_name, ()):
            item = pinned(kind, descriptor)
            if item is not None:
                found.setdefault(item.key, item)
    text = instructions_item(instructions)
    if text is not None:
        found[text.key] = text
    return found


def changed_paths(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Where two pinned field sets differ, as dotted paths (`description`,
    `annotations.destructiveHint`, `inputSchema.properties.path`), sorted; a list that differs
    is named whole."""
    return sorted(_diff(before, after, ""))


def _diff(before: Any, after: Any, path: str) -> Iterator[str]:
    if before == after:
        return
    depth = path.count(".") + 1 if path else 0
    if isinstance(before, Mapping) and isinstance(after, Mapping) and depth < _PATH_DEPTH:
        for key in sorted(set(before) | set(after)):
            step = f"{path}.{key}" if path else str(key)
            if key not in before or key not in after:
                yield step
            else:
                yield from _diff(before[key], after[key], step)
    else:
        yield path or "(value)"
