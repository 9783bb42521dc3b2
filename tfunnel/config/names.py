"""Which upstream a surfaced tool name can belong to, before the upstream listed its tools (pure).

The naming rule itself (SPEC §3): an upstream tool is surfaced as the `as` of its enabled expose
entry, else as `<upstream id>_<tool>`.
"""

from __future__ import annotations

from collections.abc import Iterable

from tfunnel.config.expose import ExposeEntry


def owners(name: str, upstream_ids: Iterable[str], expose: Iterable[ExposeEntry]) -> list[str]:
    """The upstreams (of `upstream_ids`) whose tool could be surfaced as `name`: the upstream of an
    enabled expose entry naming it first, then those whose `<id>_` prefix it carries, longest id
    first (`a_b_tool` is more likely `a_b`'s than `a`'s)."""
    ids = list(upstream_ids)
    named = [e.upstream for e in expose if e.enabled and e.as_name == name and e.upstream in ids]
    prefixed = sorted((uid for uid in ids if name.startswith(f"{uid}_")), key=len, reverse=True)
    return list(dict.fromkeys([*named, *prefixed]))
