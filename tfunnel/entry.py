"""The `tfunnel` command's entry point: a process-wide import choice, then the CLI.

Importing structlog imports asyncio, only for structlog's async logging methods, which tfunnel
never calls (see tfunnel.log): about 20 ms of every cold start, which a desktop client waits for.
So the command's process defers asyncio (a stand-in in `sys.modules` that loads the real module the
first time anything uses it) before anything imports structlog. Only the command does this; code
that imports tfunnel as a library gets ordinary imports.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types


class _Deferred(types.ModuleType):
    """Stands in for a module nobody has used yet. `import name` hands out the stand-in; the
    first attribute it lacks loads the real module, which then takes its place in `sys.modules`
    while the stand-in takes on all of its attributes (for those who imported it early)."""

    def __getattr__(self, attribute: str) -> object:
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        real = importlib.import_module(self.__name__)
        self.__dict__.update(real.__dict__)
        return getattr(real, attribute)


def _defer(name: str) -> None:
    if name in sys.modules:
        return
    spec = importlib.machinery.PathFinder.find_spec(name)
    if spec is not None:
        stand_in = _Deferred(name)
        stand_in.__spec__ = spec  # what `import` and `find_spec` look at on a loaded module
        sys.modules[name] = stand_in


def main() -> int:
    _defer("asyncio")
    from tfunnel.cli import main as cli_main

    return cli_main()
