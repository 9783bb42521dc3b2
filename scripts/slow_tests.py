"""Rewrite tests/slow.txt, the in-process tests that `scripts/test --fast` leaves out, from the
durations of a run: `scripts/test -m "not e2e" --junitxml=/tmp/run.xml`, then
`.venv/bin/python scripts/slow_tests.py /tmp/run.xml`.

A test function is slow when its cases together took `THRESHOLD_S` or more (setup and teardown
included): what it waits for is real (a hook's process, a timeout it proves, a real server), so no
machine makes it quick. Everything else stays in the fast tier. The full run (`scripts/test`)
runs both.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

THRESHOLD_S = 0.3
ROOT = Path(__file__).resolve().parents[1]
SLOW = ROOT / "tests" / "slow.txt"
HEADER = """\
# In-process test functions that take 0.3 s or more in all (scripts/slow_tests.py wrote this from a
# run's durations; `scripts/test --fast` leaves them out, `scripts/test` runs them). One per line.
"""


def function_id(case: ElementTree.Element) -> str:
    """`tests/test_x.py::test_name` of a junit test case (its parameters dropped)."""
    module = case.attrib["classname"].replace(".", "/")
    name = case.attrib["name"].split("[", 1)[0]
    return f"{module}.py::{name}"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    totals: dict[str, float] = defaultdict(float)
    for case in ElementTree.parse(argv[0]).getroot().iter("testcase"):
        totals[function_id(case)] += float(case.attrib.get("time", 0))
    slow = sorted(name for name, seconds in totals.items()
                  if seconds >= THRESHOLD_S and not name.startswith("tests/e2e/"))
    SLOW.write_text(HEADER + "".join(f"{name}\n" for name in slow))
    print(f"{len(slow)} slow test functions of {len(totals)} written to {SLOW.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
