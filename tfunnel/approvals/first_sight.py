"""The first-sight check as the approvals use it: `poison.inspect` over an item's pinned fields,
turned into a short reason that is safe to show the model (rule ids and top-level fields only:
a finding's detail may quote the very text it flags, and that goes to the operator's log)."""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from tfunnel.approvals import poison
from tfunnel.approvals.decide import Inspect
from tfunnel.approvals.pins import Item

log = structlog.get_logger("tfunnel.approvals")
_MAX_REASON = 240


GATEWAY = "the gateway"


def first_sight(others: Mapping[str, str]) -> Inspect:
    """`others`: the names a new item must not pass itself off as, and their owners (the
    gateway's meta-tools, owned by `GATEWAY`)."""
    def inspect(item: Item) -> str | None:
        descriptor = item.fields.get("instructions", "") if item.kind == "instructions" else item.fields
        findings = poison.inspect(item.kind, descriptor, others=others)
        if not findings:
            return None
        log.warning("upstream item flagged on first sight", item=item.key, findings=poison.summary(findings))
        parts: list[str] = []
        for finding in findings:
            part = f"{finding.rule} in {finding.field.split('.', 1)[0]}"
            if part not in parts:
                parts.append(part)
        reason = "; ".join(parts)
        return reason if len(reason) <= _MAX_REASON else reason[:_MAX_REASON - 3] + "..."
    return inspect
