"""Architecture rules, checked on the source: sans-IO protocol, one-way dependencies."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tfunnel"

# Data flows one way (docs/architecture.md): inbound transport (serve) → route → surface → gate →
# tools | upstream; home (the config home as a whole) and app compose them. Each layer may not
# import what sits above it; protocol/ is sans-IO and imports nothing else of ours but errors.
_TOP = ("tfunnel.app", "tfunnel.app_http", "tfunnel.cli")
_ABOVE_SURFACE = ("tfunnel.serve", "tfunnel.route", "tfunnel.home", "tfunnel.manage", *_TOP)
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "protocol": ("trio", "anyio", "asyncio", "socket", "subprocess", "hypercorn", "tfunnel.serve",
                 "tfunnel.route", "tfunnel.surface", "tfunnel.gate", "tfunnel.tools", "tfunnel.config",
                 "tfunnel.upstream", "tfunnel.proc", "tfunnel.observe", "tfunnel.home",
                 "tfunnel._fastpath", "tfunnel.manage", *_TOP),
    "proc": ("tfunnel.config", "tfunnel.observe", "tfunnel.surface", "tfunnel.gate", "tfunnel.tools",
             "tfunnel.upstream", *_ABOVE_SURFACE),
    "config": ("tfunnel.surface", "tfunnel.gate", "tfunnel.tools", "tfunnel.upstream", "tfunnel.observe",
               *_ABOVE_SURFACE),
    "observe": ("tfunnel.surface", "tfunnel.gate", "tfunnel.tools", "tfunnel.upstream", *_ABOVE_SURFACE),
    "tools": ("tfunnel.surface", "tfunnel.gate", "tfunnel.upstream", *_ABOVE_SURFACE),
    "gate": ("tfunnel.surface", "tfunnel.tools", "tfunnel.upstream", *_ABOVE_SURFACE),
    "upstream": ("tfunnel.surface", "tfunnel.gate", "tfunnel.tools", *_ABOVE_SURFACE),
    "surface": _ABOVE_SURFACE,
    "route": ("tfunnel.serve", "tfunnel.home", "tfunnel.manage", *_TOP),
    "home": ("tfunnel.serve", "tfunnel.route", "tfunnel.manage", *_TOP),
    # serve reads the supervisor's statistics for /health and /metrics, nothing else of upstream/.
    # approvals/ decides what upstreams showed the model; it sits below everything that shows it.
    "approvals": ("tfunnel.serve", "tfunnel.route", "tfunnel.surface", "tfunnel.gate", "tfunnel.tools",
                  "tfunnel.upstream", "tfunnel.home", "tfunnel.manage", "tfunnel.app", "tfunnel.cli"),
    # auth/ is the HTTP service's resource server: config helpers, protocol and errors, nothing above.
    "auth": ("tfunnel.serve", "tfunnel.route", "tfunnel.surface", "tfunnel.gate", "tfunnel.tools",
             "tfunnel.upstream", "tfunnel.home", "tfunnel.manage", *_TOP),
    # ui/ is a face of the management operations: it composes nothing (app_http and cli build it).
    "ui": _TOP,
    "serve": ("tfunnel.tools", "tfunnel.surface", "tfunnel.gate", "tfunnel.upstream.session",
              "tfunnel.upstream.client", "tfunnel.manage", *_TOP),
}


def imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_does_not_import_upward(layer: str) -> None:
    """Modules of a layer never import what sits above them (or, for protocol/, any I/O)."""
    offenders = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for name in sorted(imports(path))
        if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN[layer])
    ]
    assert offenders == []


def test_no_module_outgrows_the_size_budget() -> None:
    """Modules stay under ~500 lines (STYLE.md); a bigger one must say why at the top."""
    too_big = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
               if len(p.read_text().splitlines()) > 500 and "size:" not in p.read_text()[:2000]]
    assert too_big == []
