"""What a management operation decides before anything is written (pure): its result, the change,
and whether that change loosens the gate; and when the user must confirm it.

A human confirms what loosens the gate (SPEC §9): a model must not be able to switch off its own
guard rails. `gate.confirmManagement` says what is confirmed: `loosening` (the default: each
operation says which of its changes loosen, and why), `all` (every change), `none` (nothing but
what is always confirmed: accepting a held upstream change).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfunnel.config.expose import UpstreamSpec
from tfunnel.config.model import ConfirmManagement, Settings
from tfunnel.gate.manifest import shown_url
from tfunnel.manage.edit import Change
from tfunnel.surface.catalog import Catalog
from tfunnel.upstream.states import UpstreamStatistics


@dataclass(frozen=True)
class Plan:
    """An operation's decision: `result` (the structured result, `ok` added on success), the
    `change` to write (None for a read), and `loosens`: why the change loosens the gate."""

    result: dict[str, Any] = field(default_factory=dict)
    change: Change | None = None
    loosens: str | None = None
    # Confirmed whatever `gate.confirmManagement` says (accepting a held upstream change: a model
    # must not approve its own rug pull, whatever the operator relaxed elsewhere).
    always_confirmed: bool = False


@dataclass(frozen=True)
class Env:
    """What operations read besides the home's files: the live surface and upstreams."""

    home: Path
    settings: Callable[[], Settings] = Settings
    catalog: Callable[[], Catalog | None] = lambda: None
    upstreams: Callable[[], list[UpstreamStatistics]] = list
    # Connect an upstream once without supervising it: what it lists, and why it did not come up.
    discover: Callable[[UpstreamSpec], Awaitable[tuple[Mapping[str, Any], str | None]]] | None = None
    # What the tool approvals would show of an upstream's lists (held and quarantined items
    # replaced): a discovery result goes to the model, and must not carry what a listing would not.
    preview: Callable[[str, Mapping[str, Any]], Mapping[str, Any]] | None = None


def question(policy: ConfirmManagement, tool: str, plan: Plan) -> str | None:
    """The confirmation to put to the user before `plan` is written, or None (pure). Its text
    names the exact change, so an answer to it answers for that change only."""
    if plan.change is None:
        return None
    if not plan.always_confirmed and (policy == "none" or (policy == "loosening" and plan.loosens is None)):
        return None
    if plan.loosens:  # what makes it matter comes first, whole (the summary may be shortened)
        return (f"A tool call ({tool}) asks for a change that loosens the gate: {plan.loosens}. "
                f"The change: {plan.change.summary}. Allow this change?")
    return f"A tool call ({tool}) asks to {plan.change.summary}. Allow this change?"


def runs(what: str, command: Any) -> str:
    """A loosening reason for code the gate does not check (the command shown whole)."""
    return f"{what} runs code the policy hooks do not check: {json.dumps(command, ensure_ascii=False)}"


def shown(value: Any) -> str:
    """A value as it appears in a change's summary (JSON, compact, bounded)."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= 300 else text[:297] + "..."


def without_secrets(row: Mapping[str, Any]) -> dict[str, Any]:
    """An upstream or http-hook entry as results, summaries and the audit log may show it: the
    names of its headers and environment variables, not their values, and its URL without the
    query or fragment (any of them may hold a credential)."""
    kept = dict(row)
    if isinstance(row.get("url"), str):
        kept["url"] = shown_url(row["url"])
    for name in ("headers", "env"):
        if isinstance(row.get(name), Mapping):
            kept[name] = sorted(row[name])
    return kept


def changed_keys(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
