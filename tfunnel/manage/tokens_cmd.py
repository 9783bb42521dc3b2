"""`tfunnel tools --tokens`: what each top-level tool definition costs in tokens, and the whole
`tools/list` lean (as served) against full (every enabled tool top-level), offline from the home.

The upstream tools are their definitions as last approved (`mcp/tool-approvals.json`: a gateway
on this home pins each upstream tool it showed), named as the gateway names them; an upstream
that never ran has none. The counter is `toolfunnel.json` `tokens`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfunnel.approvals.book import APPROVALS
from tfunnel.config.expose import load_expose
from tfunnel.config.files import load
from tfunnel.config.load import load_register, load_settings, load_state
from tfunnel.manage.builtins import served_register
from tfunnel.observe.tokens import Counter, dumps
from tfunnel.route.methods import INSTRUCTIONS
from tfunnel.surface import meta
from tfunnel.surface.catalog import Catalog
from tfunnel.surface.full import full_top_level
from tfunnel.surface.upstream_tools import assemble, assemble_wrapped

TOOL_PIN = "tool:"


def offline_catalog(home: Path) -> Catalog:
    """The catalog a gateway on `home` would serve, its upstream tools as last approved."""
    register, state = served_register(load_register(home)), load_state(home)[0]
    expose = load_expose(home)
    book = load(home, APPROVALS)
    approved: dict[str, list[Mapping[str, Any]]] = {}
    for upstream in expose.upstreams:
        record = book.upstreams.get(upstream.id)
        if upstream.enabled and record is not None:
            approved[upstream.id] = [dict(pin.fields) for key, pin in record.approved.items()
                                     if key.startswith(TOOL_PIN)]
    if state.passthrough is not None:
        tools = assemble_wrapped(state.passthrough, approved.get(state.passthrough, []), expose.expose)
    else:
        local = {e.id for e in register.tools} | {e.name for e in register.tools}
        tools = assemble(approved, expose.expose, local)
    return Catalog(register, state, tools)


def token_rows(catalog: Catalog, counter: Counter) -> tuple[list[tuple[str, bool, int]], int, int]:
    """Each tool of the full or the lean list (name, on the lean list, tokens of its definition),
    and the tokens of the whole `tools/list` result, lean and full."""
    lean = catalog.top_level(meta.DEFINITIONS)
    full = full_top_level(catalog, meta.DEFINITIONS)
    on_lean = {t["name"] for t in lean}
    seen: set[str] = set()
    rows: list[tuple[str, bool, int]] = []
    for tool in (*lean, *full):
        if tool["name"] not in seen:
            seen.add(tool["name"])
            rows.append((tool["name"], tool["name"] in on_lean, counter.count(dumps(tool))))
    return rows, counter.count(dumps({"tools": lean})), counter.count(dumps({"tools": full}))


def print_tokens(home: Path) -> int:
    """Print the table and the totals; 0."""
    counter = Counter(load_settings(home).tokens)
    rows, lean, full = token_rows(offline_catalog(home), counter)
    width = max((len(name) for name, _, _ in rows), default=4)
    print(f"{'NAME':<{width}}  LEAN  TOKENS")
    for name, listed, tokens in rows:
        print(f"{name:<{width}}  {'yes' if listed else 'no':<4}  {tokens}")
    instructions = counter.count(INSTRUCTIONS)
    print(f"\ntools/list: lean {lean} tokens, full {full} tokens "
          f"({len([r for r in rows if r[1]])} tools top-level of {len(rows)}); "
          f"instructions (without upstream sections) {instructions} tokens; counter {counter.name}")
    if counter.fallback is not None:
        print(f"(the {counter.choice} vocabulary could not be loaded: {counter.fallback})")
    return 0
