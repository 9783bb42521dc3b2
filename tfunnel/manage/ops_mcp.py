"""Upstream servers and the expose list: `tf_mcp_add`, `tf_mcp_set`, `tf_expose`, and the CLI's
`expose_remove` (plans only).

An upstream row is written with the fields of `mcp/expose.json` as given (the same names, checked
by the file's own parser). Adding a stdio upstream (a command the gateway starts), or one that
opts out of the isolation guard (`allowOutsidePaths`, `allowCodeLoadingEnv`), loosens the gate;
so does re-enabling an upstream or an expose entry an operator disabled. Disabling or removing
the wrapped upstream clears the wrap in the same change (`wrapCleared`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from tfunnel.approvals import store
from tfunnel.config.expose import EXPOSE, NAME_PREFIXES, UPSTREAM_KEYS, empty_document, load_expose
from tfunnel.config.load import STATE
from tfunnel.errors import ConfigError, ToolFailure
from tfunnel.gate.manifest import MANIFEST, shown_url
from tfunnel.manage.edit import Change, current, validate
from tfunnel.manage.ops_hooks import EMPTY_MANIFEST
from tfunnel.manage.ops_wrap import cleared_for
from tfunnel.manage.plans import Env, Plan, runs, shown, without_secrets
from tfunnel.manage.rename import Refusal, RenamePlan, expose_renames, plan_renames

GUARD_OPT_OUTS = ("allowOutsidePaths", "allowCodeLoadingEnv")
EXPOSE_FIELDS = ("as", "category", "enabled")


def mcp_add(env: Env, args: Mapping[str, Any]) -> Plan:
    document = current(env.home, EXPOSE, empty_document())
    upstreams, exposed = _lists(document)
    upstream_id = str(args["id"])
    if any(isinstance(u, dict) and u.get("id") == upstream_id for u in upstreams):
        raise ToolFailure(f"an upstream with id {upstream_id!r} exists; use tf_mcp_set or choose another id")
    row = {k: args[k] for k in UPSTREAM_KEYS if k in args}
    upstreams.append(row)
    entries = []
    for item in args.get("expose") or []:
        entry = {"upstream": upstream_id, "tool": item["tool"],
                 **{k: item[k] for k in EXPOSE_FIELDS if k in item}}
        exposed.append(entry)
        entries.append(entry)
    opted = [k for k in GUARD_OPT_OUTS if row.get(k) is True]
    reasons = []
    if "command" in row:  # a stdio upstream: a program the gateway starts
        reasons.append(runs(f"upstream {upstream_id!r}", {k: row[k] for k in ("command", "args", "env", "cwd")
                                                          if k in row}))
    elif "url" in row:  # a remote one: whatever it lists is trusted on first sight (the tool approvals)
        reasons.append(f"upstream {upstream_id!r} connects to {shown_url(str(row['url']))}, and what that "
                       "server lists reaches the model trusted on first sight (a held change of another "
                       "upstream could come back this way under a new id)")
    if opted:
        reasons.append(f"it opts out of the isolation guard ({', '.join(opted)})")
    loosens = "; ".join(reasons) or None
    return Plan({"upstream": row, "exposed": entries},
                Change(f"add upstream {upstream_id!r} {shown(without_secrets(row))}"
                       + (f" exposing {shown(entries)}" if entries else ""), {EXPOSE: document}), loosens)


def reconnect_stamp() -> str:
    """A `reconnectAt` value: now, to the microsecond, so that two reconnects in one second are two
    changes of the definition (each restarts the upstream)."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def mcp_set(env: Env, args: Mapping[str, Any]) -> Plan:
    document = current(env.home, EXPOSE, empty_document())
    had_expose = "expose" in document  # a file without the array stays without one
    upstreams, exposed = _lists(document)
    upstream_id, action = str(args["id"]), str(args["action"])
    row = next((u for u in upstreams if isinstance(u, dict) and u.get("id") == upstream_id), None)
    if row is None:
        known = [str(u.get("id")) for u in upstreams if isinstance(u, dict)]
        raise ToolFailure(f"no upstream with id {upstream_id!r} (known: {', '.join(known) or 'none'})")
    result: dict[str, Any] = {"id": upstream_id, "action": action}
    if action == "remove":
        upstreams.remove(row)
        document["expose"] = [e for e in exposed
                              if not (isinstance(e, dict) and e.get("upstream") == upstream_id)]
        result["removed"] = True
    elif action in ("enable", "disable"):
        was_off = row.get("enabled") is False
        row["enabled"] = result["enabled"] = action == "enable"
        if action == "enable" and was_off:
            return Plan(result, Change(f"enable upstream {upstream_id!r}", {EXPOSE: document}),
                        f"upstream {upstream_id!r} was disabled by an operator")
    elif action in ("pin", "unpin"):
        row["legacyPin"] = result["legacyPin"] = action == "pin"
    else:  # reconnect: a new stamp is a changed definition, which restarts it (a stopped one too)
        row["reconnectAt"] = result["reconnectAt"] = reconnect_stamp()
    if not had_expose and not document["expose"]:
        del document["expose"]
    documents: dict[Any, dict[str, Any]] = {EXPOSE: document}
    summary = f"{action} upstream {upstream_id!r}"
    state = cleared_for(env, upstream_id) if action in ("disable", "remove") else None
    if state is not None:  # a wrap of nothing would serve an empty surface: it goes in the same change
        documents[STATE] = state
        result["wrapCleared"] = True
        summary += " and clear the wrap of it"
    return Plan(result, Change(summary, documents))


def expose(env: Env, args: Mapping[str, Any]) -> Plan:
    if args.get("remove") is True:
        return expose_remove(env, args)
    before = current(env.home, EXPOSE, empty_document())
    document = current(env.home, EXPOSE, empty_document())
    upstreams, exposed = _lists(document)
    upstream_id, tool = str(args["upstream"]), str(args["tool"])
    if not any(isinstance(u, dict) and u.get("id") == upstream_id for u in upstreams):
        raise ToolFailure(f"no upstream with id {upstream_id!r}; add it with tf_mcp_add first")
    entry = next((e for e in exposed if isinstance(e, dict) and e.get("upstream") == upstream_id
                  and e.get("tool") == tool), None)
    if entry is None:
        entry = {"upstream": upstream_id, "tool": tool}
        exposed.append(entry)
    was_off = entry.get("enabled") is False
    for key in EXPOSE_FIELDS:
        if key in args:
            entry[key] = args[key]
    reenabled = was_off and entry.get("enabled") is not False
    documents: dict[Any, dict[str, Any]] = {EXPOSE: document}
    result: dict[str, Any] = {"entry": entry}
    renamed = _follow_renames(env, before, document, documents)
    if renamed is not None:
        result["renamed"], result["notices"] = list(renamed.changes), list(renamed.notices)
    return Plan(result, Change(f"expose {shown(entry)}", documents),
                f"the expose entry was disabled by an operator: {shown(entry)}" if reenabled else None)


def expose_name_prefix(env: Env, args: Mapping[str, Any]) -> Plan:
    """Set `expose.json`'s `namePrefix` (`tfunnel expose name-prefix auto|always`): every upstream
    tool whose name that changes is a rename, so hook matchers and state follow it (or it is
    refused), as for `expose`. A file without `namePrefix` counts as "always" here (its hooks and
    state were written with the long names): setting "auto" explicitly rewrites them."""
    value = args.get("namePrefix")
    if value not in NAME_PREFIXES:
        raise ToolFailure(f"namePrefix must be one of {', '.join(map(repr, NAME_PREFIXES))}, got {value!r}")
    before = current(env.home, EXPOSE, empty_document())
    if before.get("namePrefix") == value:
        return Plan({"namePrefix": value, "changed": False})
    document = {**before, "namePrefix": value}
    if "namePrefix" not in before:  # written before the rule: its hooks and state use the long names
        before = {**before, "namePrefix": "always"}
    documents: dict[Any, dict[str, Any]] = {EXPOSE: document}
    result: dict[str, Any] = {"namePrefix": value, "changed": True}
    renamed = _follow_renames(env, before, document, documents, _recorded_tools(env))
    if renamed is not None:
        result["renamed"], result["notices"] = list(renamed.changes), list(renamed.notices)
    return Plan(result, Change(f"set namePrefix to {value!r}", documents))


def _recorded_tools(env: Env) -> list[tuple[str, str]]:
    """Every upstream tool `mcp/tool-approvals.json` has seen (approved or held): the tool lists
    outside a gateway (a tool never seen has no hook or state written for it by a listing)."""
    book = store.read(env.home).value
    if book is None:
        return []
    return [(upstream, key.removeprefix("tool:")) for upstream, record in book.upstreams.items()
            for key in (*record.approved, *record.held) if key.startswith("tool:")]


def expose_remove(env: Env, args: Mapping[str, Any]) -> Plan:
    """Drop an expose entry (the CLI's `tfunnel expose remove`): the tool goes back to its
    default name (`<upstream>_<tool>`, or its own when already prefixed), reached through the
    meta-tools; hook matchers and state follow that rename, or it is refused, as for `expose`."""
    before = current(env.home, EXPOSE, empty_document())
    document = current(env.home, EXPOSE, empty_document())
    _, exposed = _lists(document)
    upstream_id, tool = str(args["upstream"]), str(args["tool"])
    entry = next((e for e in exposed if isinstance(e, dict) and e.get("upstream") == upstream_id
                  and e.get("tool") == tool), None)
    if entry is None:
        known = [f"{e.get('upstream')}/{e.get('tool')}" for e in exposed if isinstance(e, dict)]
        raise ToolFailure(f"no expose entry for tool {tool!r} of upstream {upstream_id!r} "
                          f"(exposed: {', '.join(known) or 'none'})")
    exposed.remove(entry)
    documents: dict[Any, dict[str, Any]] = {EXPOSE: document}
    result: dict[str, Any] = {"removed": entry}
    renamed = _follow_renames(env, before, document, documents)
    if renamed is not None:
        result["renamed"], result["notices"] = list(renamed.changes), list(renamed.notices)
    return Plan(result, Change(f"stop exposing {shown(entry)}", documents))


def _follow_renames(env: Env, before: dict[str, Any], after: dict[str, Any],
                    documents: dict[Any, dict[str, Any]],
                    named: Sequence[tuple[str, str]] = ()) -> RenamePlan | None:
    """Carry the hooks' exact-name matchers and the state keys over to the names an expose edit
    gives (`manage.rename`); refuse, naming the hook, when a matcher would stop firing."""
    try:
        validate(env.home, Change("", {EXPOSE: after}))
    except ToolFailure:
        return None  # the edit itself is invalid: committing it says why
    catalog = env.catalog()
    local = catalog.local_names() if catalog is not None else set()
    displays = {(t.upstream, t.tool): t.display for t in catalog.upstream} if catalog is not None else {}
    displays |= {key: key[1] for key in named if key not in displays}  # tools named, not listed here
    renames = expose_renames(before, after, local, displays)
    if isinstance(renames, Refusal):
        raise ToolFailure("nothing was changed: " + "; ".join(renames.reasons))
    if not renames:
        return None
    manifest = current(env.home, MANIFEST, EMPTY_MANIFEST)
    state = current(env.home, STATE, {})
    plan = plan_renames(renames, manifest.get("hooks", []), state)
    if isinstance(plan, Refusal):
        raise ToolFailure("nothing was changed: " + "; ".join(plan.reasons))
    if plan.manifest_rows != manifest.get("hooks", []):
        documents[MANIFEST] = {**manifest, "hooks": plan.manifest_rows}
    if plan.state_doc != state:
        documents[STATE] = plan.state_doc
    return plan


def _lists(document: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    upstreams = document.setdefault("upstreams", [])
    exposed = document.setdefault("expose", [])
    if not isinstance(upstreams, list) or not isinstance(exposed, list):
        raise ToolFailure(f"{EXPOSE.name}: \"upstreams\" and \"expose\" must be lists; fix the file first")
    return upstreams, exposed


async def discover(env: Env, args: Mapping[str, Any]) -> dict[str, Any]:
    """`tf_mcp_discover`: connect the upstream `id` once and say what it has (nothing is exposed)."""
    upstream_id = str(args["id"])
    try:
        config = load_expose(env.home)
    except ConfigError as exc:
        raise ToolFailure(f"{EXPOSE.name} is not valid ({exc.problems[0] if exc.problems else exc}); "
                          "fix it first") from None
    spec = next((u for u in config.upstreams if u.id == upstream_id), None)
    if spec is None:
        raise ToolFailure(f"no upstream with id {upstream_id!r} (known: "
                          f"{', '.join(u.id for u in config.upstreams) or 'none'})")
    if env.discover is None:
        raise ToolFailure("this gateway cannot connect upstreams here")
    listed, problem = await env.discover(spec)
    if env.preview is not None:
        listed = env.preview(upstream_id, listed)
    tools = [{"name": t.get("name"), "title": t.get("title"), "description": t.get("description", "")}
             for t in listed.get("tools", ())]
    return {"id": upstream_id, "connected": problem is None, "error": problem, "tools": tools,
            "prompts": [p.get("name") for p in listed.get("prompts", ())],
            "resources": len(listed.get("resources", ())), "templates": len(listed.get("templates", ()))}
