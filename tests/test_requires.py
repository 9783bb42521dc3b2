"""`requires` in toolfunnel.json: the decision (pure), the probe on real programs, and the one
advisory stderr line per unmet entry at every start."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tfunnel.home.requires import Seen, at_least, probe, unmet, verdict, version_tuple
from tfunnel.testing.cli import run

pytestmark = pytest.mark.timeout(60)

NODE = {"command": "node", "min": "18", "why": "the js tools"}


@pytest.mark.parametrize(("entry", "seen", "expected"), [
    ({"command": "node"}, Seen("/usr/bin/node"), None),
    ({"command": "node"}, Seen(None), "requires: node not found on PATH"),
    (NODE, Seen(None), "requires: node not found on PATH (needed for the js tools)"),
    (NODE, Seen("/n", output="v18.0.1\n"), None),
    (NODE, Seen("/n", output="v20.11.0"), None),
    (NODE, Seen("/n", output="node v16.2.0"), "requires: node 16.2.0 found, 18 or newer wanted (needed for "
                                               "the js tools)"),
    (NODE, Seen("/n", output="no digits here"),
     "requires: no version number in the output of `node --version`; 18 or newer wanted (needed for the js "
     "tools)"),
    (NODE, Seen("/n", failure="no answer within 3 s"), "requires: node --version failed (no answer within "
                                                        "3 s); 18 or newer wanted (needed for the js tools)"),
    ({"command": "py", "min": "3.11", "versionArg": "-V"}, Seen("/p", output="Python 3.9.7"),
     "requires: py 3.9.7 found, 3.11 or newer wanted"),
    ({"command": "py", "min": 3}, Seen("/p", output="3.0"), None),
    ({"command": "py", "min": "x"}, Seen("/p", output="3"), "requires[0] (py): 'min' must be a version "
                                                             "such as \"18\" or \"3.11\""),
    ({"why": "x"}, None, "requires[0]: needs a non-empty 'command' string"),
])
def test_verdict(entry: dict[str, Any], seen: Seen | None, expected: str | None) -> None:
    assert verdict(0, entry, seen) == expected


@pytest.mark.parametrize(("found", "wanted", "ok"), [
    ("18.10", "18.2", True), ("18", "18.0.0", True), ("17.99", "18", False), ("3.11.0", "3.11", True),
])
def test_versions_compare_part_by_part(found: str, wanted: str, ok: bool) -> None:
    f, w = version_tuple(found), version_tuple(wanted)
    assert f is not None and w is not None
    assert at_least(f, w) is ok


def fake_program(folder: Path, name: str, output: str) -> None:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\necho '{output}'\n")
    path.chmod(0o755)


def test_probe_runs_the_version_command(tmp_path: Path) -> None:
    fake_program(tmp_path / "bin", "fakenode", "v16.2.0")
    path_env = str(tmp_path / "bin")
    seen = probe({"command": "fakenode", "min": "18"}, path_env)
    assert seen is not None and seen.path == str(tmp_path / "bin" / "fakenode")
    assert unmet([{"command": "fakenode", "min": "18"}, {"command": "fakenode", "min": "16"},
                  {"command": "absent-program-xyz"}], path_env) == [
        "requires: fakenode 16.2.0 found, 18 or newer wanted",
        "requires: absent-program-xyz not found on PATH",
    ]


def test_every_start_reports_unmet_requirements_and_goes_on(home: Path, tmp_path: Path) -> None:
    """One stderr line per unmet entry; the command still runs (advisory)."""
    fake_program(tmp_path / "bin", "fakenode", "v16.2.0")
    settings = json.loads((home / "toolfunnel.json").read_text())
    settings["requires"] = [{"command": "fakenode", "min": "18", "why": "the js tools"},
                            {"command": "absent-program-xyz"}, {"command": "fakenode"}]
    (home / "toolfunnel.json").write_text(json.dumps(settings))
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = run(home, "check", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if "requires" in line]
    assert lines == ["tfunnel: warning: requires: fakenode 16.2.0 found, 18 or newer wanted (needed for "
                     "the js tools)",
                     "tfunnel: warning: requires: absent-program-xyz not found on PATH"]
