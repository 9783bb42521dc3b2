"""What each view of the admin UI shows (docs/ui.md, "API"), read from one `Source`.

The views read what the management operations read (`manage.ops_*`: the home's files, the live
surface and the supervisor's state through the same `Env`), so the UI shows what `tf_list`,
`tfunnel approvals` and `tfunnel settings` show. Nothing here writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfunnel.approvals.book import Book
from tfunnel.auth.config import AUTH, AUTH_FILE
from tfunnel.config.files import read_config
from tfunnel.config.load import REGISTER
from tfunnel.config.model import META_TOOL_NAMES
from tfunnel.errors import ToolFailure
from tfunnel.gate.gated import ToolCall
from tfunnel.gate.manifest import HookManifest, shown_url
from tfunnel.manage import ops_approvals, ops_list, ops_settings, ops_wrap
from tfunnel.manage.builtins import Management
from tfunnel.manage.edit import current
from tfunnel.manage.plans import Env
from tfunnel.observe.audit import AuditLog
from tfunnel.observe.tokens import Counter, dumps
from tfunnel.surface import meta
from tfunnel.surface.catalog import Catalog
from tfunnel.surface.full import full_top_level
from tfunnel.tools.resolve import ScriptNotRunnable, resolve_script

# The most of the audit log's end that a view reads (its newest records).
TAIL_BYTES = 1024 * 1024
MAX_ACTIVITY = 500
ACTIVITY_FILTERS = ("all", "deny", "ask", "error")


@dataclass
class Source:
    """Where the views read from: `mode` "gateway" (beside a running gateway: its live surface
    and supervisor) or "standalone" (the home's files only)."""

    mode: str
    management: Management
    env: Env
    audit: AuditLog
    hooks: Callable[[], HookManifest]
    counter: Counter

    @property
    def home(self) -> Path:
        return self.env.home


def status(source: Source) -> dict[str, Any]:
    settings = source.env.settings()
    catalog = source.env.catalog()
    upstreams = ops_list.tf_list(source.env, {"kind": "mcps"}).result["mcps"]
    hooks = ops_list.tf_list(source.env, {"kind": "hooks"}).result["hooks"]
    held = sum(len(r.held) for r in _book(source).upstreams.values())
    tools = 0 if catalog is None else sum(1 for row in catalog.rows() if row.kind != "meta")
    return {"mode": source.mode, "server": {"name": settings.server_name, "version": settings.server_version},
            "home": str(source.home),
            "counts": {"tools": tools, "upstreams": len(upstreams), "hooks": len(hooks), "held": held}}


def surface(source: Source) -> dict[str, Any]:
    """What a client without a profile sees now, with each item's tokens. Blocking (the counter
    may load its vocabulary): run it in a worker thread."""
    catalog = source.env.catalog()
    if catalog is None:
        return {"top": [], "lean": [], "prompts": [], "resources": [],
                "totals": {"top": 0, "lean": 0, "prompts": 0, "resources": 0, "full": 0},
                "counter": source.counter.name, "note": "no gateway surface here (the register is not valid)"}
    count = source.counter.count
    top = catalog.top_level(meta.DEFINITIONS)
    full = full_top_level(catalog, meta.DEFINITIONS)
    on_top = {tool["name"] for tool in top}
    kinds = {row.name: row.kind for row in catalog.rows()}

    def item(tool: Mapping[str, Any]) -> dict[str, Any]:
        return {"name": tool["name"], "title": tool.get("title") or "",
                "kind": kinds.get(tool["name"], "upstream"), "tokens": count(dumps(tool))}

    lean = [item(tool) for tool in full if tool["name"] not in on_top]
    prompts = [{"name": p.surfaced, "upstream": p.upstream, "tokens": count(dumps(dict(p.definition)))}
               for p in catalog.prompts()]
    resources = [{"uri": r.surfaced, "name": str(r.definition.get("name", "")), "upstream": r.upstream,
                  "tokens": count(dumps(dict(r.definition))), "template": r.key != "uri"}
                 for r in (*catalog.resources(), *catalog.templates())]
    return {"top": [item(tool) for tool in top], "lean": lean, "prompts": prompts, "resources": resources,
            "totals": {"top": count(dumps({"tools": top})), "lean": sum(t["tokens"] for t in lean),
                       "prompts": sum(p["tokens"] for p in prompts),
                       "resources": sum(r["tokens"] for r in resources),
                       "full": count(dumps({"tools": full}))},
            "counter": source.counter.name}


def tools(source: Source) -> dict[str, Any]:
    catalog = source.env.catalog()
    listed = ops_list.tf_list(source.env, {"kind": "tools", "includeHidden": True}).result["tools"]
    hooks = source.hooks()
    names = _gate_names(catalog)
    out = []
    for row in listed:
        gate_names = names.get(row["id"], (row["id"], row["name"]))
        out.append({**row, "upstream": _upstream_of(catalog, row["id"]),
                    "pre": _firing(hooks, "PreToolUse", gate_names),
                    "post": _firing(hooks, "PostToolUse", gate_names)})
    return {"tools": out}


def tool_detail(source: Source, tool_id: str) -> dict[str, Any] | None:
    """A register tool's entry as written and its script's text (None: no such register tool)."""
    try:
        register = current(source.home, REGISTER, {"tools": []})
    except ToolFailure:
        return None
    rows = register.get("tools", [])
    entry = next((row for row in rows if isinstance(row, dict) and row.get("id") == tool_id), None)
    if entry is None:
        return None
    script_text: str | None = None
    invoke = entry.get("invoke")
    if isinstance(invoke, dict) and invoke.get("type") == "script" and isinstance(invoke.get("path"), str):
        script_text = _read_script(source.home, invoke["path"])
    return {"entry": entry, "scriptText": script_text}


def upstreams(source: Source) -> dict[str, Any]:
    rows = ops_list.tf_list(source.env, {"kind": "mcps"}).result["mcps"]
    try:
        wrap = ops_wrap.status(source.env).result
    except ToolFailure as exc:
        wrap = {"wrapping": None, "as": None, "upstreams": [], "error": str(exc)}
    return {"upstreams": rows, "wrap": wrap}


def hooks(source: Source) -> dict[str, Any]:
    rows = ops_list.tf_list(source.env, {"kind": "hooks"}).result["hooks"]
    last: dict[str, list[dict[str, Any]]] = {}
    for record in _records(source.audit.path):
        hook = record.get("hook")
        if record.get("type") == "gate" and isinstance(hook, str) and len(last.setdefault(hook, [])) < 5:
            last[hook].append({k: record.get(k) for k in ("ts", "tool", "decision", "reason")})
    return {"hooks": [{**row, "last": last.get(str(row.get("id")), [])} for row in rows]}


def activity(source: Source, kind: str = "all", limit: int = 200) -> dict[str, Any]:
    if kind not in ACTIVITY_FILTERS:
        raise ToolFailure(f"type must be one of {', '.join(ACTIVITY_FILTERS)}, not {kind!r}")
    limit = max(1, min(limit, MAX_ACTIVITY))
    entries = []
    for record in _records(source.audit.path):
        if passes(record, kind):
            entries.append(record)
            if len(entries) >= limit:
                break
    return {"enabled": source.audit.enabled, "path": str(source.audit.path), "entries": entries}


def passes(record: Mapping[str, Any], kind: str) -> bool:
    """Whether an audit record belongs under an Activity filter (pure; the page applies the same
    rule to live records)."""
    if kind == "deny":
        return record.get("decision") == "deny" or record.get("denied") is True
    if kind == "ask":  # a hook asked: the decision is the user's answer (or gate.askFallback)
        return record.get("asked") is True or record.get("decision") == "ask"
    if kind == "error":
        return record.get("ok") is False or "error" in record
    return True


def approvals(source: Source) -> dict[str, Any]:
    book = _book(source)
    out = []
    for upstream, record in sorted(book.upstreams.items()):
        if not record.held:
            continue
        chosen = ops_approvals.Chosen({upstream: None})
        held = [{"key": d["item"], "kind": d["item"].split(":", 1)[0] if ":" in d["item"] else d["item"],
                 "name": d["item"].split(":", 1)[-1], "reason": d["reason"], "why": d["why"],
                 "since": record.held[d["item"]].since, "diff": d["diff"].splitlines(),
                 "digest": record.held[d["item"]].digest}
                for d in ops_approvals.diff(book, chosen)]
        out.append({"id": upstream, "held": held})
    return {"upstreams": out}


def settings(source: Source) -> dict[str, Any]:
    result = ops_settings.settings(source.env, {}).result
    return {"file": str(source.home / "toolfunnel.json"), "settings": result["settings"],
            "restartRequired": [*ops_settings.SETTING_FIELDS, "gate.askFallback", "gate.confirmManagement"],
            "auth": auth_summary(source.home)}


def auth_summary(home: Path) -> dict[str, Any]:
    """`auth/auth.config.json` as the Settings view shows it, read-only: whether the HTTP service
    requires bearer tokens and of whom (it holds no secret: a resource server verifies tokens
    with the issuer's public keys), or the problems that refuse the HTTP service's start."""
    reading = read_config(home, AUTH)
    shown: dict[str, Any] = {"file": str(home / AUTH_FILE), "present": reading.kind != "missing",
                             "problems": [str(p) for p in reading.problems]}
    config = reading.value
    if config is not None and not reading.problems:
        shown.update(enabled=config.enabled, issuer=config.issuer,
                     audience=config.audience_as_written or config.audience,
                     jwksUri=shown_url(config.jwks_uri) if config.jwks_uri else "",
                     algorithms=list(config.algorithms), requiredScopes=list(config.required_scopes),
                     clockToleranceSec=config.clock_tolerance_s)
    return shown


# --- helpers ---

def _book(source: Source) -> Book:
    try:
        return ops_approvals.current_book(source.home)
    except ToolFailure:
        return Book()


def _gate_names(catalog: Catalog | None) -> dict[str, tuple[str, ...]]:
    """Every name a hook's matcher is tried on, per tool (the gate's own rule, `ToolCall.names`)."""
    if catalog is None:
        return {}
    wrap = catalog.wrap
    names: dict[str, tuple[str, ...]] = {name: (name,) for name in META_TOOL_NAMES}
    names.update({e.id: ToolCall(surfaced=e.id, tool_id=e.id, display=e.name, args={}).names()
                  for e in catalog.register.tools})
    names.update({t.surfaced: ToolCall(surfaced=t.surfaced, tool_id=t.tool, display=t.display, args={},
                                       upstream=t.upstream, former=t.former,
                                       server=wrap.server if wrap is not None else None).names()
                  for t in catalog.upstream})
    return names


def _upstream_of(catalog: Catalog | None, name: str) -> str | None:
    if catalog is None:
        return None
    return next((t.upstream for t in catalog.upstream if t.surfaced == name), None)


def _firing(manifest: HookManifest, event: str, names: Iterable[str]) -> list[str]:
    names = tuple(names)
    return [hook.id for hook in manifest.active(event) if hook.matches(names)]


def _read_script(home: Path, relative: str) -> str | None:
    """The text of the script the tool runs: the file the runtime resolves (inside
    `tools/scripts/` only, whatever the entry says), else None."""
    try:
        path = resolve_script(home, relative)
    except ScriptNotRunnable:
        return None
    try:
        data = path.read_bytes()[:1024 * 1024]
    except OSError:
        return None
    return data.decode("utf-8", errors="replace")


def _records(path: Path) -> list[dict[str, Any]]:
    """The audit log's newest records first (its last `TAIL_BYTES`; unreadable lines skipped)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - TAIL_BYTES))
            data = handle.read(TAIL_BYTES)
    except OSError:
        return []
    lines = data.split(b"\n")
    if len(data) == TAIL_BYTES or size > TAIL_BYTES:
        lines = lines[1:]  # the first may be cut
    out = []
    for line in reversed(lines):
        record = parse_record(line)
        if record is not None:
            out.append(record)
    return out


def parse_record(line: bytes) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
