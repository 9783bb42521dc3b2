"""`--json` for the listing commands (`tfunnel tools`, `hook list`, `mcp list`, `log status`):
the same results the in-band `tf_list` and `tf_log` give, printed for scripts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tfunnel.config.load import load_register, load_state
from tfunnel.home.listing import read_listing, rows
from tfunnel.manage import ops_list, ops_settings
from tfunnel.manage.plans import Env
from tfunnel.surface.catalog import Catalog


def listing(home: Path, kind: str) -> dict[str, Any]:
    """The `ok` result of one listing: `tools`, `hooks`, `mcps` or `log`."""
    env = Env(home)
    if kind == "hooks":
        return {"ok": True, "hooks": ops_list.tf_list(env, {"kind": "hooks"}).result["hooks"]}
    if kind == "mcps":
        return {"ok": True, "mcps": ops_list.tf_list(env, {"kind": "mcps"}).result["mcps"]}
    if kind == "log":
        return {"ok": True, **ops_settings.log(env, {"action": "status"}).result}
    catalog = Catalog(load_register(home), load_state(home)[0])
    local = [{"id": r.name, "name": r.display, "kind": r.kind, "category": r.category, "mode": r.mode,
              "enabled": r.visibility.enabled, "hot": r.visibility.hot, "hidden": r.visibility.hidden}
             for r in catalog.rows()]
    cached = read_listing(home)
    upstream: dict[str, Any] = {"source": "none"} if cached is None else {
        "source": "live" if cached.live else "cached", "pid": cached.pid, "written": cached.written,
        "tools": rows(cached)}
    return {"ok": True, "tools": local, "upstream": upstream}


def print_listing(home: Path, kind: str) -> int:
    print(json.dumps(listing(home, kind), indent=2, ensure_ascii=False))
    return 0
