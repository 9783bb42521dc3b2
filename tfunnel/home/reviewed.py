"""The ready upstreams as clients see them: the supervisor's lists after the tool approvals.

One place joins the two: for each ready upstream, its identity (`serverInfo`), instructions and
lists go through `Approvals.review_all` (remembered until they change; those new since their last
review are judged together, in one update of the file), and what comes back — held items
replaced, holds named — is what the live config builds the surface from and what the server
instructions quote.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tfunnel.approvals.keeper import Approvals, Listing
from tfunnel.approvals.views import Items, Shown
from tfunnel.upstream.supervised import Upstream
from tfunnel.upstream.supervisor import Supervisor

# Judging passes per rebuild: a second one when the command line accepted something meanwhile.
_PASSES = 3


class Reviewed:
    def __init__(self, supervisor: Supervisor, approvals: Approvals,
                 others: Callable[[str], Mapping[str, str]]) -> None:
        """`others(upstream)`: the names a new item of `upstream` must not pass itself off as,
        and their owners (for the first-sight check)."""
        self._supervisor = supervisor
        self._approvals = approvals
        self._others = others

    def shown(self) -> dict[str, Shown]:
        ready = self._supervisor.ready()
        out: dict[str, Shown] = {}
        for _ in range(_PASSES):  # again while a review finds approvals changed under it
            listings = {uid: _listing(upstream) for uid, upstream in ready.items()}
            out = self._approvals.review_all(listings, self._others)
            if not self._approvals.take_stale():
                break
        self._approvals.forget(list(ready))
        return out

    def lists(self) -> dict[str, Mapping[str, Items]]:
        return {uid: shown.lists for uid, shown in self.shown().items()}

    def tools(self) -> dict[str, Items]:
        return {uid: shown.lists.get("tools", ()) for uid, shown in self.shown().items()}

    def holds(self) -> dict[str, dict[str, str]]:
        return {uid: {key: hold.refusal for key, hold in shown.holds.items()}
                for uid, shown in self.shown().items() if shown.holds}

    def instructions(self) -> dict[str, str]:
        return {uid: shown.instructions for uid, shown in self.shown().items()}


def _listing(upstream: Upstream) -> Listing:
    connection = upstream.connection
    info: Mapping[str, Any] = connection.server_info if connection is not None else {}
    name, version = info.get("name"), info.get("version")
    return Listing(server_name=name if isinstance(name, str) else "",
                   server_version=version if isinstance(version, str) else "",
                   instructions=connection.instructions if connection is not None else "",
                   lists=upstream.listed, strict=upstream.spec.strict_approval)
