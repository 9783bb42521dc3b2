"""Wrap mode's management side (plans only): `tf_wrap`, the CLI's `tfunnel wrap`, and clearing a
wrap whose upstream is disabled or removed.

A wrap is two reserved keys of `tools/tools.state.json` (SPEC §10): `passthrough`, the wrapped
upstream's id, and `passthroughAs`, the server id its tools carry in hooks' Claude Code names
(`mcp__<as>__<tool>`; default the upstream's id). Every other key of the file is kept as it is.

Setting a wrap loosens the gate twice over, so a human always confirms it in-band
(`Plan.always_confirmed`): the upstream becomes the whole surface, which hides every management
tool, `tf_wrap` included (only the command line's `tfunnel wrap --off` undoes it), and the
isolation guard is suspended for that upstream. Clearing a wrap gives the funnel surface back and
is not confirmed beyond what `gate.confirmManagement: all` asks.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfunnel.config.expose import EXPOSE, UPSTREAM_ID, ExposeConfig, UpstreamSpec, load_expose
from tfunnel.config.load import STATE
from tfunnel.errors import ConfigError, ToolFailure
from tfunnel.manage.edit import Change, current
from tfunnel.manage.plans import Env, Plan
from tfunnel.upstream.isolation import suspended_by_wrap

PASSTHROUGH, PASSTHROUGH_AS = "passthrough", "passthroughAs"
UNDO = "tfunnel wrap --off"


def tf_wrap(env: Env, args: Mapping[str, Any]) -> Plan:
    """`tf_wrap`: `{}` the status, `{off: true}` clear, `{upstream, as?, confirm: true}` set."""
    upstream, as_name = args.get("upstream"), args.get("as")
    if args.get("off") is True:
        if upstream is not None or as_name is not None:
            raise ToolFailure("off: true clears the wrap; it takes no upstream or as")
        return clear(env)
    if upstream is None:
        if as_name is not None:
            raise ToolFailure("as names the wrapped upstream's tools; give the upstream too")
        return status(env)
    if args.get("confirm") is not True:
        raise ToolFailure(
            f"wrapping {upstream!r} needs confirm: true. A wrap makes that upstream the whole surface: "
            "this tool (tf_wrap) and every other management tool disappear with the rest, so the model "
            f"cannot undo it; recovery is the command line's `{UNDO}` (or removing \"passthrough\" from "
            "tools/tools.state.json). Call again with confirm: true once the user agrees.")
    return wrap_set(env, str(upstream), None if as_name is None else str(as_name))


def status(env: Env) -> Plan:
    """What is wrapped now, and the upstreams that could be."""
    wrapping, as_name = wrapped(current(env.home, STATE, {}))
    return Plan({"wrapping": wrapping, "as": as_name, "upstreams": upstream_rows(load_config(env))})


def clear(env: Env) -> Plan:
    """Clear the wrap (nothing to write when none is set)."""
    state = current(env.home, STATE, {})
    was, _ = wrapped(state)
    if not any(key in state for key in (PASSTHROUGH, PASSTHROUGH_AS)):
        return Plan({"cleared": False, "was": None})
    return Plan({"cleared": was is not None, "was": was},
                Change(f"clear the wrap (was {was!r})", {STATE: without_wrap(state)}))


def wrap_set(env: Env, upstream_id: str, as_name: str | None) -> Plan:
    """Wrap the configured, enabled upstream `upstream_id` (its tools named `mcp__<as_name>__*`
    in hooks when given); the result's `warning` is the security notice."""
    if as_name is not None and not UPSTREAM_ID.fullmatch(as_name):
        raise ToolFailure(f"as {as_name!r} is not a server id: it must start with a letter or digit and "
                          "use only letters, digits, '_', '.' and '-'")
    config = load_config(env)
    spec = config.upstream(upstream_id)
    configured = ", ".join(f"{u.id}{'' if u.enabled else ' (disabled)'}" for u in config.upstreams) or "none"
    if spec is None:
        raise ToolFailure(f"no upstream {upstream_id!r} in {EXPOSE.name} (configured: {configured})")
    if not spec.enabled:
        raise ToolFailure(f"upstream {upstream_id!r} is disabled in {EXPOSE.name}; enable it first "
                          f"(tfunnel mcp enable {upstream_id}) (configured: {configured})")
    state = current(env.home, STATE, {})
    new = {**without_wrap(state), PASSTHROUGH: upstream_id, **({PASSTHROUGH_AS: as_name} if as_name else {})}
    warning = notice(spec, env.home, as_name)
    result: dict[str, Any] = {"wrapping": upstream_id, "as": as_name, "warning": warning}
    if new == state:
        return Plan(result)  # already so: nothing to write, nothing to confirm
    outside = suspended_by_wrap(spec, env.home)
    guard = (f"{len(outside)} value(s) outside the home that it would refuse: {'; '.join(outside)}"
             if outside else "nothing of its definition is outside the home now")
    loosens = (f"upstream {upstream_id!r} becomes the whole surface (every call still passes the gate, but "
               f"tf_wrap and the other management tools are hidden until `{UNDO}` on the command line), "
               f"and the isolation guard is suspended for it ({guard})")
    summary = f"wrap upstream {upstream_id!r}" + (f" as {as_name!r}" if as_name else "")
    return Plan(result, Change(summary, {STATE: new}), loosens, always_confirmed=True)


def notice(spec: UpstreamSpec, home: Path, as_name: str | None) -> str:
    """The WRAP SECURITY NOTICE: what wrapping `spec` means, and what of its definition lies
    outside the home (what the isolation guard, suspended for it, would refuse)."""
    name = as_name or spec.id
    lines = [f"WRAP SECURITY NOTICE: wrapping upstream {spec.id!r}",
             "- it becomes the whole surface: clients see its own serverInfo, instructions, tools, prompts "
             "and resources, and none of the gateway's register tools, meta-tools or management tools "
             f"(tf_wrap included: undo with `{UNDO}`);",
             f"- the gate still runs: every tools/call passes the hooks as mcp__{name}__<tool>, and "
             f"\"enabled\": false on {spec.id}_<tool> still hides a tool;"]
    if spec.transport != "stdio":
        lines.append("- the isolation guard (stdio upstreams only) does not apply to this remote upstream.")
        return "\n".join(lines)
    outside = suspended_by_wrap(spec, home)
    root = os.path.realpath(home)
    if outside:
        lines.append(f"- the isolation guard is suspended for it: it starts although these lie outside the "
                     f"home {root}:")
        lines += [f"    {item}" for item in outside]
    else:
        lines.append(f"- the isolation guard is suspended for it: nothing of its args, cwd or env lies "
                     f"outside the home {root} now, and an edit that adds such a value is not refused "
                     "while it is wrapped.")
    return "\n".join(lines)


def wrapped(state: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The wrapped upstream and its `as` name, as a state document holds them."""
    wrapping, as_name = state.get(PASSTHROUGH), state.get(PASSTHROUGH_AS)
    return (wrapping if isinstance(wrapping, str) else None,
            as_name if isinstance(as_name, str) and isinstance(wrapping, str) else None)


def without_wrap(state: Mapping[str, Any]) -> dict[str, Any]:
    """`state` without the wrap's keys (every other key kept, in order)."""
    return {k: v for k, v in state.items() if k not in (PASSTHROUGH, PASSTHROUGH_AS)}


def cleared_for(env: Env, upstream_id: str) -> dict[str, Any] | None:
    """The state document with the wrap cleared when it wraps `upstream_id` (which is being
    disabled or removed), else None. A state file that cannot be read is left alone: the change
    to the upstream does not wait on it (`tfunnel check` reports both)."""
    try:
        state = current(env.home, STATE, {})
    except ToolFailure:
        return None
    return without_wrap(state) if wrapped(state)[0] == upstream_id else None


def upstream_rows(config: ExposeConfig) -> list[dict[str, Any]]:
    return [{"id": u.id, "transport": u.transport, "enabled": u.enabled} for u in config.upstreams]


def load_config(env: Env) -> ExposeConfig:
    """The home's upstreams, or `ToolFailure` when mcp/expose.json is not valid."""
    try:
        return load_expose(env.home)
    except ConfigError as exc:
        raise ToolFailure(f"{EXPOSE.name} is not valid ({exc.problems[0] if exc.problems else exc}); "
                          "fix it first") from None
