"""Reviewing and accepting what the tool approvals hold: `tfunnel approvals` and `tf_accept_change`.

A target is `<upstream>` (everything it holds), `<upstream>/<name>` (a held tool by its upstream
name; a prompt or template with its kind: `prompt:<name>`, `template:<uriTemplate>`; the server's
`instructions`), or every upstream. Accepting approves each held item exactly as it was held (its
digest), so a descriptor that changed again since is held again. Accepting lets the model see and
call what an upstream changed, so `tf_accept_change` always counts as loosening the gate: a model
must not approve its own rug pull.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfunnel.approvals import decide
from tfunnel.approvals.book import APPROVALS, Book, Held, to_document
from tfunnel.approvals.keeper import now_iso
from tfunnel.approvals.store import read
from tfunnel.errors import ToolFailure
from tfunnel.manage.edit import Change
from tfunnel.manage.plans import Env, Plan

_KINDS = ("tool:", "prompt:", "template:")


@dataclass(frozen=True)
class Chosen:
    """The held items a target names: upstream -> keys (None: all it holds)."""

    keys: Mapping[str, frozenset[str] | None]


def choose(book: Book, upstream: str | None, name: str | None) -> Chosen:
    """The held items `upstream`/`name` names (every held item when both are None); raise
    `ToolFailure` saying what is held when it names nothing held."""
    held = {u: r.held for u, r in book.upstreams.items() if r.held}
    if upstream is None:
        if not held:
            raise ToolFailure("nothing is held for approval")
        return Chosen({u: None for u in held})
    if upstream not in book.upstreams:
        known = ", ".join(sorted(book.upstreams)) or "none"
        raise ToolFailure(f"no approvals for an upstream {upstream!r} (known: {known})")
    items = held.get(upstream, {})
    if not items:
        raise ToolFailure(f"upstream {upstream!r} holds nothing for approval")
    if name is None:
        return Chosen({upstream: None})
    key = _key(items, name)
    if key is None:
        raise ToolFailure(f"upstream {upstream!r} holds no {name!r}; it holds: {', '.join(sorted(items))}")
    return Chosen({upstream: frozenset({key})})


def _key(items: Mapping[str, Held], name: str) -> str | None:
    if name in items:  # a full key: tool:x, prompt:x, template:..., instructions
        return name
    for kind in _KINDS:
        if kind + name in items:
            return kind + name
    return None


def accepted(book: Book, chosen: Chosen, now: str) -> tuple[Book, dict[str, list[str]]]:
    """`book` with the chosen items approved, and what was accepted by upstream."""
    done: dict[str, list[str]] = {}
    for upstream, keys in chosen.keys.items():
        record, keys_done = decide.accept(book.upstreams[upstream], keys, now)
        book = book.with_record(upstream, record)
        done[upstream] = list(keys_done)
    return book, done


def split_target(target: str | None) -> tuple[str | None, str | None]:
    """`UPSTREAM` or `UPSTREAM/ITEM` (an upstream id has no `/`; an item may: a template's URI);
    an empty part is refused rather than read as "everything"."""
    if target is None:
        return None, None
    upstream, sep, name = target.partition("/")
    if not upstream or (sep and not name):
        raise ToolFailure(f"{target!r} names no item: write UPSTREAM or UPSTREAM/ITEM")
    return upstream, (name if sep else None)


def current_book(env_home: Any) -> Book:
    reading = read(env_home)
    if reading.value is None:
        problems = "; ".join(str(p) for p in reading.problems)
        raise ToolFailure(f"{APPROVALS.name} cannot be read ({problems}); fix the file first, nothing was "
                          "changed")
    return reading.value


def accept_change(env: Env, args: Mapping[str, Any]) -> Plan:
    """tf_accept_change {upstream, tool?}: approve what an upstream holds (the user confirms)."""
    book = current_book(env.home)
    chosen = choose(book, args["upstream"], args.get("tool"))
    new, done = accepted(book, chosen, now_iso())
    pairs = [(u, k) for u, keys in done.items() for k in keys]
    reviewed = args.get("digests")
    if isinstance(reviewed, Mapping):  # accept exactly what the reviewer saw (the admin UI's diff)
        for u, k in pairs:
            now = book.upstreams[u].held[k].digest
            if reviewed.get(k) != now:
                raise ToolFailure(f"{u}/{k} holds another change than the one reviewed (now {now[:19]}); "
                                  "look at it again before accepting")
    reasons = "; ".join(f"{u}/{k}: {book.upstreams[u].held[k].reason}" for u, k in pairs)
    # Each item with its digest: what the user confirms is that descriptor, and a change while
    # they are asked makes the question differ (`Management.run` then writes nothing).
    items = ", ".join(f"{u}/{k} ({book.upstreams[u].held[k].digest[:19]})" for u, k in pairs)
    change = Change(f"accept the held {items}", {APPROVALS: to_document(new)})
    return Plan({"accepted": done}, change, always_confirmed=True,
                loosens=f"the model could then see and call what the upstream changed ({reasons})")


def listing(book: Book) -> list[dict[str, Any]]:
    """`tfunnel approvals list --json`: each upstream's identity, approved count, and holds."""
    return [{"upstream": u, "server": {"name": r.server_name, "version": r.server_version},
             "approved": len(r.approved),
             "held": [{"item": k, "why": h.why, "reason": h.reason, "since": h.since, "digest": h.digest}
                      for k, h in sorted(r.held.items())]}
            for u, r in sorted(book.upstreams.items())]


def diff(book: Book, chosen: Chosen) -> list[dict[str, Any]]:
    """For each chosen held item: the approved fields (None when it never had any), the held
    ones, and a unified diff of the two as indented JSON."""
    out: list[dict[str, Any]] = []
    for upstream, keys in sorted(chosen.keys.items()):
        record = book.upstreams[upstream]
        for key, held in sorted(record.held.items()):
            if keys is not None and key not in keys:
                continue
            pin = record.approved.get(key)
            before = _pretty(pin.fields) if pin is not None else []
            after = _pretty(held.fields)
            text = "".join(difflib.unified_diff(before, after, f"{upstream}/{key} (approved)",
                                                f"{upstream}/{key} (held)"))
            out.append({"upstream": upstream, "item": key, "why": held.why, "reason": held.reason,
                        "digest": held.digest,
                        "approved": dict(pin.fields) if pin is not None else None,
                        "held": dict(held.fields), "diff": text})
    return out


def _pretty(fields: Mapping[str, Any]) -> list[str]:
    text = json.dumps(fields, indent=2, sort_keys=True, ensure_ascii=False)
    return [line + "\n" for line in text.split("\n")]
