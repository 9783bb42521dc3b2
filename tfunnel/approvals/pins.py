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
import math
import re
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
_SURROGATE = re.compile("[\ud800-\udfff]")
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
    """Total over whatever an upstream's JSON decoded to: non-finite numbers and lone surrogates
    (both of which a lenient decoder lets through) have a canonical spelling too (`Infinity`,
    `\\ud800`), so no descriptor can make a review fail."""
    canonical = json.dumps(_canonical(fields), sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                           allow_nan=True)
    return "sha256:" + hashlib.sha256(canonical.encode("ascii")).hexdigest()


def _canonical(fields: Mapping[str, Any]) -> dict[str, Any]:
    """`required` lists are sets: their order carries no meaning (a server that builds one from a
    set may list it differently at each start)."""
    out = dict(fields)
    for schema_field in ("inputSchema", "outputSchema"):
        schema = out.get(schema_field)
        if isinstance(schema, Mapping) and isinstance(schema.get("required"), list) \
                and all(isinstance(r, str) for r in schema["required"]):
            out[schema_field] = {**schema, "required": sorted(set(schema["required"]))}
    return out


def storable(value: Any) -> Any:
    """`value` as strict JSON can hold it (what the approvals file and its readers can take): a
    non-finite number becomes its name as a string, a lone surrogate U+FFFD. For display and
    diffs only; digests are taken from the item as listed."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value) if _has_surrogate(value) else value
    if isinstance(value, Mapping):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(v) for v in value]
    return value


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def item_key(kind: Kind, name: str) -> str:
    return "instructions" if kind == "instructions" else f"{kind}:{name}"


def pinned(kind: Kind, descriptor: Mapping[str, Any]) -> Item | None:
    """The pinned part of one listed descriptor; None when it has no name to pin it by (the
    lister drops such items anyway)."""
    name = descriptor.get(_NAMED_BY[kind])
    if not isinstance(name, str):
        return None
    fields = {f: descriptor[f] for f in FIELDS[kind] if f in descriptor}
    return Item(item_key(kind, name), kind, storable(fields), digest(fields))


def instructions_item(text: str) -> Item | None:
    """The server's instructions as an item; None when it sent none."""
    if not text:
        return None
    fields = {"instructions": text}
    return Item("instructions", "instructions", storable(fields), digest(fields))


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


# The annotations MCP defines: the only keys under `annotations` a reason names (any other key is
# the upstream's own text, and a reason is shown to the model).
ANNOTATION_HINTS = frozenset({"title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"})


def changed_fields(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """What differs, in names that are ours, never the upstream's (pure): pinned top-level fields,
    and under `annotations` the hints MCP defines (`annotations.destructiveHint`); anything else
    under a field is that field. Safe to show the model and to put in a question."""
    out: list[str] = []
    for name in sorted(set(before) | set(after)):
        if before.get(name) == after.get(name):
            continue
        old, new = before.get(name), after.get(name)
        if name == "annotations" and isinstance(old, Mapping) and isinstance(new, Mapping):
            keys = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
            if keys and all(k in ANNOTATION_HINTS for k in keys):
                out += [f"annotations.{k}" for k in keys]
                continue
        out.append(name if isinstance(name, str) and name.isidentifier() else "(a field)")
    return out


def changed_paths(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """Where two pinned field sets differ, as dotted paths (`description`,
    `annotations.destructiveHint`, `inputSchema.properties.path`), sorted; a list that differs
    is named whole. The paths carry the upstream's own keys: for `tfunnel approvals diff` (printed
    escaped), never for the model (`changed_fields` is)."""
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
