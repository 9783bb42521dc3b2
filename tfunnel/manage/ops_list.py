"""`tf_list`: what the home holds, with the live state the gateway has of it (a read)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfunnel.config.expose import EXPOSE, empty_document
from tfunnel.gate.manifest import HOOK_STATE, MANIFEST, shown_url
from tfunnel.manage.edit import current
from tfunnel.manage.ops_hooks import EMPTY_MANIFEST, switch_map
from tfunnel.manage.plans import Env, Plan


def tf_list(env: Env, args: Mapping[str, Any]) -> Plan:
    kind = str(args["kind"])
    include_hidden = args.get("includeHidden") is True
    if kind == "mcps":
        return Plan({"kind": kind, "mcps": _mcps(env)})
    if kind == "hooks":
        return Plan({"kind": kind, "hooks": _hooks(env)})
    catalog = env.catalog()
    if catalog is None:
        return Plan({"kind": kind, kind: [], "note": "no gateway surface here"})
    if kind == "prompts":
        return Plan({"kind": kind, "prompts": [{"name": p.surfaced, "upstream": p.upstream,
                                                "title": p.title, "summary": p.description}
                                               for p in catalog.prompts()]})
    if kind == "resources":
        items = [{"uri": r.surfaced, "upstream": r.upstream, "name": r.name, "summary": r.description}
                 for r in catalog.resources()]
        templates = [{"uriTemplate": t.surfaced, "upstream": t.upstream, "name": t.name,
                      "summary": t.description} for t in catalog.templates()]
        return Plan({"kind": kind, "resources": items, "resourceTemplates": templates})
    tools = []
    for row in catalog.rows():
        vis = row.visibility
        if vis.hidden and not include_hidden:
            continue
        tools.append({"id": row.name, "name": row.display, "kind": row.kind, "category": row.category,
                      "mode": row.mode, "enabled": vis.enabled, "hot": vis.hot, "hidden": vis.hidden})
    return Plan({"kind": kind, "tools": tools})


def _mcps(env: Env) -> list[dict[str, Any]]:
    document = current(env.home, EXPOSE, empty_document())
    live = {s.id: s for s in env.upstreams()}
    exposed = [e for e in document.get("expose", []) if isinstance(e, dict)]
    out = []
    for row in document.get("upstreams", []):
        if not isinstance(row, dict):
            continue
        stats = live.get(str(row.get("id")))
        state: dict[str, Any] = {"state": "not running here"} if stats is None else {
            "state": stats.state, "pid": stats.pid, "tools": stats.tools, "era": stats.era,
            "restarts": stats.restarts, "lastError": stats.last_error, "stoppedReason": stats.stopped_reason}
        out.append({"id": row.get("id"), "transport": row.get("transport", "stdio"),
                    "enabled": row.get("enabled", True) is not False,
                    "description": row.get("description", ""),
                    **state, "exposed": [e for e in exposed if e.get("upstream") == row.get("id")]})
    return out


def _hooks(env: Env) -> list[dict[str, Any]]:
    manifest = current(env.home, MANIFEST, EMPTY_MANIFEST)
    overlay = current(env.home, HOOK_STATE, {})
    switches = switch_map(overlay)
    out = []
    for row in manifest.get("hooks", []):
        if isinstance(row, dict):
            enabled = switches.get(str(row.get("id")), row.get("enabled") is True) is True
            shown_row = {k: row[k] for k in ("id", "event", "matcher", "type", "command", "description")
                         if k in row}
            if isinstance(row.get("url"), str):  # an http hook: no query, and never its header values
                shown_row["url"] = shown_url(row["url"])
            out.append({**shown_row, "enabled": enabled})
    return out
