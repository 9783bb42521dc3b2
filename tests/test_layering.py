"""Architecture rules, checked on the source: sans-IO protocol, one-way dependencies."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tfunnel"

# Each layer may not import these (data flows transport → router → surface/gate → tools).
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "protocol": ("trio", "anyio", "asyncio", "socket", "subprocess", "hypercorn", "tfunnel.serve",
                 "tfunnel.surface", "tfunnel.gate", "tfunnel.tools", "tfunnel.config", "tfunnel.app",
                 "tfunnel.router", "tfunnel.live"),
    "config": ("tfunnel.serve", "tfunnel.surface", "tfunnel.gate", "tfunnel.tools", "tfunnel.router",
               "tfunnel.app", "tfunnel.live"),
    "tools": ("tfunnel.serve", "tfunnel.surface", "tfunnel.gate", "tfunnel.router", "tfunnel.app"),
    "gate": ("tfunnel.serve", "tfunnel.surface", "tfunnel.tools", "tfunnel.router", "tfunnel.app"),
    "surface": ("tfunnel.serve", "tfunnel.router", "tfunnel.app"),
    "serve": ("tfunnel.app", "tfunnel.tools", "tfunnel.surface"),
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
