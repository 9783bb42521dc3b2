"""What a client is shown of an upstream while some of its items are held (pure).

A held item stays listed, so the model can tell the operator about it, but what the upstream
sent in its place is not shown: the untrusted text is exactly what a rug pull or a poisoned
descriptor uses. A held tool, prompt or template is listed with its last approved fields (a
neutral stand-in when it never had any) and a description that starts with a one-line warning
naming what changed; held instructions are replaced by their approved version, or left out,
behind the same kind of line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfunnel.approvals.book import Held, Record
from tfunnel.approvals.pins import LIST_OF, item_key

Items = tuple[dict[str, Any], ...]
_STAND_IN: Mapping[str, Mapping[str, Any]] = {"tool": {"inputSchema": {"type": "object"}},
                                              "prompt": {}, "template": {}}


@dataclass(frozen=True)
class Hold:
    """A held item as the surface needs it: the warning (model-facing, one line) and the
    refusal a call of it gets."""

    key: str
    warning: str
    refusal: str


@dataclass(frozen=True)
class Shown:
    """One upstream as a client sees it: its lists with held items replaced, its instructions,
    and its holds by key (`tool:<name>`, `prompt:<name>`, `template:<uriTemplate>`,
    `instructions`)."""

    lists: Mapping[str, Items]
    instructions: str
    holds: Mapping[str, Hold]


def accept_command(upstream: str, key: str) -> str:
    """The command that accepts `key`: a tool by its bare name unless that would name something
    else (`instructions`, or a name with a colon), every other item by its full key."""
    name = key.partition(":")[2] if key.startswith("tool:") else key
    if key.startswith("tool:") and (name == "instructions" or ":" in name):
        name = key
    return f"tfunnel approvals accept {upstream}/{name}"


def hold_of(upstream: str, key: str, held: Held) -> Hold:
    word = "quarantined" if held.why == "quarantined" else "held"
    command = accept_command(upstream, key)
    effect = "the new text is not shown" if key == "instructions" else "calls are refused"
    warning = f"[{word} by tfunnel: {held.reason}; {effect} until an operator accepts it with `{command}`]"
    refusal = (f"{key} of upstream {upstream!r} is {word} by tfunnel's tool approvals ({held.reason}); "
               f"it is refused until an operator reviews and accepts it (`{command}`, or "
               f"tfunnel approvals diff {upstream} to see the change)")
    return Hold(key, warning, refusal)


def shown(upstream: str, lists: Mapping[str, Sequence[Mapping[str, Any]]], instructions: str,
          record: Record) -> Shown:
    holds = {key: hold_of(upstream, key, held) for key, held in record.held.items()}
    out: dict[str, Items] = {}
    for list_name, items in lists.items():
        kind = LIST_OF.get(list_name)
        named_by = "uriTemplate" if kind == "template" else "name"
        rows: list[dict[str, Any]] = []
        keys: set[str] = set()
        for item in items:
            name = item.get(named_by)
            key = item_key(kind, name) if kind is not None and isinstance(name, str) else None
            if key is not None:
                if key in keys:  # only an item's first listing was judged: a second is never shown
                    continue
                keys.add(key)
            hold = holds.get(key) if key is not None else None
            if hold is None or kind is None or key is None:
                rows.append(dict(item))
                continue
            pin = record.approved.get(key)
            base = dict(pin.fields) if pin is not None else {named_by: name, **_STAND_IN[kind]}
            approved_text = base.get("description")
            base["description"] = hold.warning + (f"\n\n{approved_text}" if isinstance(approved_text, str)
                                                   and approved_text else "")
            rows.append(base)
        out[list_name] = tuple(rows)
    text = instructions
    hold = holds.get("instructions")
    if hold is not None:
        pin = record.approved.get("instructions")
        approved_text = pin.fields.get("instructions") if pin is not None else None
        text = hold.warning + (f"\n\n{approved_text}" if isinstance(approved_text, str) else "")
    return Shown(out, text, holds)
