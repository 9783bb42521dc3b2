"""`tfunnel wrap [ID [--as NAME] | --off]`: show, set or clear the wrap (`manage.ops_wrap`).

`tfunnel wrap` prints the status, the usage and the configured upstreams (exit 0). Setting checks
that ID is a configured, enabled upstream (else exit 1, listing the ids), prints the WRAP SECURITY
NOTICE, writes `tools/tools.state.json` (`manage.edit.commit`, via "cli"; every other key kept),
then connects the upstream once, apart from any gateway, to say which protocol eras it speaks
(bounded by the start window, `limits.upstreamStartS`; a failure does not undo the wrap), and
how to undo it. `--off` clears it. A running gateway applies the file live.

Exit status: 0 done, 1 refused (nothing written), 2 usage.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import trio

from tfunnel.app import reaping
from tfunnel.config.expose import UPSTREAM_ID, UpstreamSpec, load_expose
from tfunnel.config.home import child_environment
from tfunnel.config.load import STATE
from tfunnel.config.model import Settings
from tfunnel.errors import ToolFailure
from tfunnel.manage import ops_wrap
from tfunnel.manage.edit import commit, current
from tfunnel.manage.ops_cmd import cli_env
from tfunnel.observe.audit import AuditLog
from tfunnel.protocol.eras import Era
from tfunnel.upstream.handshake import Connection
from tfunnel.upstream.states import Context, Identity
from tfunnel.upstream.supervised import Upstream

_PREFIX = "tfunnel wrap:"
USAGE = "usage: tfunnel wrap ID [--as NAME]  (wrap an upstream)  |  tfunnel wrap --off  (clear the wrap)"


def add_wrap_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", nargs="?", metavar="ID", help="the upstream to wrap (mcp/expose.json)")
    parser.add_argument("--as", dest="as_name", type=_server_id, metavar="NAME",
                        help="the server id its tools carry in hooks' mcp__NAME__<tool> names "
                             "(default: ID)")
    parser.add_argument("--off", action="store_true", help="clear the wrap")


def _server_id(text: str) -> str:
    if not UPSTREAM_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(f"must start with a letter or digit and use only letters, digits, "
                                         f"'_', '.' and '-', got {text!r}")
    return text


def wrap_command(home: Path, upstream_id: str | None, as_name: str | None, off: bool) -> int:
    if off and (upstream_id is not None or as_name is not None):
        print(f"{_PREFIX} --off takes no ID or --as\n{USAGE}", file=sys.stderr)
        return 2
    if upstream_id is None and as_name is not None:
        print(f"{_PREFIX} --as goes with an ID\n{USAGE}", file=sys.stderr)
        return 2
    try:
        if off:
            return _off(home)
        if upstream_id is None:
            return _status(home)
        return _set(home, upstream_id, as_name)
    except ToolFailure as exc:
        print(f"{_PREFIX} {exc}", file=sys.stderr)
        return 1


def _status(home: Path) -> int:
    env = cli_env(home)
    wrapping, as_name = ops_wrap.wrapped(current(home, STATE, {}))
    print(f'wrap: wrapping "{wrapping}"' + (f' as "{as_name}"' if as_name else "") if wrapping
          else "wrap: not active")
    print(USAGE)
    try:
        rows = ops_wrap.upstream_rows(ops_wrap.load_config(env))
    except ToolFailure as exc:
        print(f"{_PREFIX} {exc}", file=sys.stderr)
        return 0
    if not rows:
        print("no upstreams in mcp/expose.json yet (add one with `tfunnel mcp add`)")
    else:
        print("upstreams (mcp/expose.json):")
        for row in rows:
            print(f"  {row['id']}  {'enabled' if row['enabled'] else 'disabled'}  {row['transport']}")
    return 0


def _off(home: Path) -> int:
    plan = ops_wrap.clear(cli_env(home))
    if plan.change is not None:
        commit(home, plan.change, AuditLog(home), via="cli")
    was = plan.result["was"]
    print(f'wrap cleared (was "{was}")' if was else "wrap: not active; nothing to clear")
    return 0


def _set(home: Path, upstream_id: str, as_name: str | None) -> int:
    env = cli_env(home)
    plan = ops_wrap.wrap_set(env, upstream_id, as_name)
    print(plan.result["warning"])
    if plan.change is not None:
        commit(home, plan.change, AuditLog(home), via="cli")
    print(f'wrap: wrapping "{upstream_id}"' + (f' as "{as_name}"' if as_name else "")
          + ("" if plan.change is not None else " (it already was)"))
    spec = load_expose(home).upstream(upstream_id)
    assert spec is not None  # wrap_set found it
    print(trio.run(probe, home, spec, env.settings()))
    print(f"undo: {ops_wrap.UNDO}")
    return 0


# The era probe.

@dataclass(frozen=True)
class Attempt:
    """One connection's outcome: the handshake's `Connection`, or why there was none."""

    connection: Connection | None
    problem: str | None = None


# An attempt the start window ended before it had its outcome.
UNFINISHED = Attempt(None)


async def probe(home: Path, spec: UpstreamSpec, settings: Settings) -> str:
    """Connect `spec` apart from any gateway (the guard suspended for it, as under the wrap) and
    say which eras it speaks: the handshake as a gateway makes it, then, for a modern upstream, a
    legacy `initialize` on a second connection. Bounded by the start window as a whole."""
    window = settings.limits.upstream_start_s
    ctx = Context(home, child_environment(home), settings.limits,
                  Identity(settings.client_name, settings.client_version), on_change=lambda: None,
                  wrapped=lambda: spec.id)
    first: Attempt | None = None
    legacy: Attempt | None = None
    async with reaping():  # whatever the upstream started beyond its process group goes too
        with trio.move_on_after(window):
            first = await attempt(ctx, spec)
            if first.connection is not None and first.connection.era is Era.MODERN:
                legacy = UNFINISHED
                legacy = await attempt(ctx, replace(spec, legacy_pin=True, modern_only=False))
    return verdict(first, legacy, window)


async def attempt(ctx: Context, spec: UpstreamSpec) -> Attempt:
    """Run `spec` as one upstream until its first attempt ended; its connection, then close it."""
    upstream = Upstream(replace(spec, enabled=True), ctx)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(upstream.run)
        await upstream.first_attempt.wait()
        outcome = Attempt(upstream.connection, upstream.last_error or upstream.unavailable())
        nursery.cancel_scope.cancel()
    return outcome


def verdict(first: Attempt | None, legacy: Attempt | None, window_s: float) -> str:
    """What the probe found, one line (pure): `first` the gateway's own handshake (None: the
    window ended first), `legacy` a legacy `initialize` after a modern handshake (None or
    `UNFINISHED`: not learned)."""
    if first is None or first.connection is None:
        why = first.problem if first is not None and first.problem else f"no answer within {window_s:g} s"
        return f"probe: could not connect ({why}); the wrap is set anyway"
    connection = first.connection
    if connection.era is Era.LEGACY:
        return (f"probe: speaks MCP {connection.protocol_version}: legacy-era (clients of both eras are "
                "served)")
    if legacy is not None and legacy.connection is not None:
        return (f"probe: speaks MCP {connection.protocol_version}: dual-era (it also answers "
                f"initialize with {legacy.connection.protocol_version})")
    if legacy is None or legacy == UNFINISHED:
        return (f"probe: speaks MCP {connection.protocol_version}: modern (whether it also speaks the "
                f"legacy era was not learned within {window_s:g} s)")
    return f"probe: speaks MCP {connection.protocol_version}: modern-only (clients of both eras are served)"
