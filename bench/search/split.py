"""Split `queries.txt` (upstream|tool|query, one a line) into the tune and held-out parts.

    .venv/bin/python bench/search/split.py

Random with a fixed seed, done once before any tuning; the held-out part is never looked at
while tuning the search.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 20261202
TUNE_SHARE = 0.6


def main() -> None:
    rows = []
    for line in (HERE / "queries.txt").read_text().splitlines():
        if line.strip():
            upstream, tool, query = line.split("|", 2)
            rows.append({"query": query, "upstream": upstream, "tool": tool})
    random.Random(SEED).shuffle(rows)
    cut = round(len(rows) * TUNE_SHARE)
    for name, part in (("queries_tune.json", rows[:cut]), ("queries_heldout.json", rows[cut:])):
        (HERE / name).write_text(json.dumps(part, indent=1) + "\n")
        print(f"{name}: {len(part)} queries")


if __name__ == "__main__":
    main()
