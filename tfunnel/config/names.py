"""Which upstream a surfaced tool name can belong to, before the upstream listed its tools (pure).

The naming rule itself (SPEC §3, `surface/upstream_tools.py`): an upstream tool is surfaced as the
`as` of its enabled expose entry, else as its own name when that begins with the upstream id and a
separator (`git_status` of `git`; unless something else claims it, or `namePrefix` is "always"),
else as `<upstream id>_<tool>`.
"""

from __future__ import annotations

from collections.abc import Iterable

from tfunnel.config.expose import SEPARATORS, ExposeEntry


def owners(name: str, upstream_ids: Iterable[str], expose: Iterable[ExposeEntry]) -> list[str]:
    """The upstreams (of `upstream_ids`) whose tool could be surfaced as `name`: the upstream of an
    enabled expose entry naming it first, then those whose `<id>_` prefix it carries, longest id
    first (`a_b_tool` is more likely `a_b`'s than `a`'s); `-` and `.` count after the id too
    (`git-status` can be `git`'s own, unprefixed name)."""
    ids = list(upstream_ids)
    named = [e.upstream for e in expose if e.enabled and e.as_name == name and e.upstream in ids]
    prefixed = sorted((uid for uid in ids if any(name.startswith(uid + sep) for sep in SEPARATORS)),
                      key=len, reverse=True)
    return list(dict.fromkeys([*named, *prefixed]))
