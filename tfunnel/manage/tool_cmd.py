"""`tfunnel tools`: every tool and its visibility; `tfunnel tool enable|disable|hot|unhot|hide|unhide
NAME [--force]`: a tool's visibility.

The name is checked first, more closely than `tf_tool_set` can without a gateway: a register
tool, a meta-tool, an enabled expose entry's name, or a name an upstream lists (that upstream,
only that one, is started to ask it; `--force` skips that); an unknown name is refused naming
the near matches. The change itself is `tf_tool_set`'s (`manage.ops_cmd.run_op`, via "cli").
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Collection
from pathlib import Path

from tfunnel.config.expose import load_expose
from tfunnel.config.load import load_register, load_state
from tfunnel.config.names import owners
from tfunnel.home.listing import read_listing
from tfunnel.manage.ops_cmd import run_op
from tfunnel.manage.ops_tools import VISIBILITY_ACTIONS
from tfunnel.surface.catalog import Catalog


def visibility_command(home: Path, args: argparse.Namespace) -> int:
    name, action = args.id, args.action
    catalog = Catalog(load_register(home), load_state(home)[0])
    expose = load_expose(home)
    known = {r.name for r in catalog.rows()} | {e.as_name for e in expose.expose if e.enabled}
    problem = ""
    if name not in known:
        # An upstream's tool names are known once it listed them: start the upstream that would
        # own this name (only that one) and look.
        candidates = owners(name, (u.id for u in expose.upstreams if u.enabled), expose.expose)
        if candidates and not args.force:
            listed, problem = upstream_tool_names(home, candidates)
            known |= listed
        if name not in known and not (args.force and candidates):
            near = difflib.get_close_matches(name, sorted(known), n=5, cutoff=0.6)
            hint = (f"did you mean {', '.join(repr(n) for n in near)}?" if near
                    else "`tfunnel tools` lists them")
            why = f" ({problem}; --force writes it anyway)" if problem else ""
            print(f"tfunnel tool: no tool with surfaced name {name!r}{why}; {hint}", file=sys.stderr)
            return 1
    key, value = VISIBILITY_ACTIONS[action]
    return run_op(home, "tf_tool_set", lambda: {"id": name, "action": action},
                  lambda _: f"{name}: {key} = {str(value).lower()}", prefix="tfunnel tool:",
                  as_json=getattr(args, "json", False))


def upstream_tool_names(home: Path, upstream_ids: Collection[str]) -> tuple[set[str], str]:
    """Start `upstream_ids` once and return the names their tools surface as, and why any of
    them did not come up ("" when all did)."""
    import trio

    from tfunnel.app import build, reaping, running  # the app composes manage/: imported late

    gateway = build(home)

    async def probe() -> tuple[set[str], str]:
        async with reaping(), running(gateway, upstream_ids):
            problems = [p for uid in upstream_ids if (p := await gateway.supervisor.wait_ready(uid))]
            return {tool.surfaced for tool in gateway.live.catalog.upstream}, "; ".join(problems)

    return trio.run(probe)


def tools_command(home: Path) -> int:
    """`tfunnel tools`: every tool with its visibility, then the upstream tools last listed."""
    catalog = Catalog(load_register(home), load_state(home)[0])
    rows = catalog.rows()
    width = max(len(r.name) for r in rows)
    print(f"{'NAME':<{width}}  KIND   ENABLED HOT   HIDDEN MODE       CATEGORY")
    for r in rows:
        v = r.visibility
        print(f"{r.name:<{width}}  {r.kind:<6} {_yn(v.enabled):<7} {_yn(v.hot):<5} {_yn(v.hidden):<6} "
              f"{r.mode:<10} {r.category}")
    _upstream_tools(home, catalog)
    return 0


def _upstream_tools(home: Path, catalog: Catalog) -> None:
    """The upstream tools as the gateway of this home last listed them, saying from when."""
    listing = read_listing(home)
    if listing is None:
        print("\nupstream tools: none listed yet (a gateway on this home lists them once it runs)")
        return
    source = f"live, from the gateway running as pid {listing.pid}" if listing.live \
        else f"as listed at {listing.written} (no gateway runs now)"
    print(f"\nupstream tools ({source}):")
    width = max((len(t.surfaced) for t in listing.tools), default=4)
    for tool in listing.tools:
        v = catalog.visibility(tool.surfaced, "upstream")
        print(f"{tool.surfaced:<{width}}  upstream {_yn(v.enabled):<7} {_yn(v.hot):<5} {_yn(v.hidden):<6} "
              f"{tool.upstream}/{tool.tool}")


def _yn(flag: bool) -> str:
    return "yes" if flag else "no"
