"""The official conformance suite's prompt, resource, template, completion, caching and logging
scenarios against `tfunnel serve --http`, with `tests/fixtures/conformance_server.py` behind it
as the upstream `test`.

Under that id the fixture's names surface as the suite asks for them (prompt `simple_prompt` as
`test_simple_prompt`; resource URIs such as `test://static-text` unchanged); its tool
`tool_with_logging` is exposed curated-direct as `test_tool_with_logging`. Each scenario runs at
every spec version it applies to (legacy 2025-11-25 and/or modern 2026-07-28), with the same
baseline as `tests/e2e/test_conformance.py`; none needs an expected-failure entry, so each must
come out with a success and no FAILURE or WARNING. One gateway process serves every scenario of
the module, and each era's scenarios are read from one suite run against it (`--suite all
--spec-version V`, one Node process per era; the scenarios outside `SCENARIOS` run too, need tools
this gateway does not expose, and are not scored here).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.conftest import FIXTURES
from tests.interop import (
    EXPECTED_FAILURES_DIR,
    FAILURE,
    KNOWN_STATUSES,
    LEGACY_ERA,
    SUCCESS,
    WARNING,
    SuiteRun,
    gateway_http_process,
    run_conformance_suite,
)
from tests.upstreams import set_upstreams
from tfunnel.config.home import seed_dir, seed_home

pytestmark = pytest.mark.timeout(300)

BASELINE = EXPECTED_FAILURES_DIR / "expected-failures.yml"
MODERN = "2026-07-28"
UPSTREAM = "test"

# (scenario, --spec-version); None is the CLI's default era (legacy 2025-11-25 unless the scenario
# was introduced in 2026-07-28).
SCENARIOS: list[tuple[str, str | None]] = [
    *((name, version)
      for name in ("prompts-list", "prompts-get-simple", "prompts-get-with-args",
                   "prompts-get-embedded-resource", "prompts-get-with-image", "resources-list",
                   "resources-read-text", "resources-read-binary", "resources-templates-read",
                   "completion-complete")
      for version in (None, MODERN)),
    # removed in 2026-07-28: legacy only
    ("resources-subscribe", None),
    ("resources-unsubscribe", None),
    ("logging-set-level", None),
    ("tools-call-with-logging", None),
    # introduced in 2026-07-28: modern only (the default)
    ("sep-2164-resource-not-found", None),
    ("caching", None),
]
INTRODUCED_MODERN = {"sep-2164-resource-not-found", "caching"}


def era(scenario: str, spec_version: str | None) -> str:
    """The era a scenario runs at: as given, else the CLI's default for it."""
    return spec_version or (MODERN if scenario in INTRODUCED_MODERN else LEGACY_ERA)


def expose_fixture(home: Path) -> None:
    """The fixture as upstream `test`, its logging tool exposed curated-direct. The script is
    copied into the home, so the isolation guard's default (no paths outside the home) holds."""
    script = home / "conformance_server.py"
    script.write_bytes((FIXTURES / "conformance_server.py").read_bytes())
    upstream: dict[str, Any] = {"id": UPSTREAM, "command": sys.executable, "args": [str(script)]}
    set_upstreams(home, upstream, expose=[{"upstream": UPSTREAM, "tool": "tool_with_logging",
                                           "as": "test_tool_with_logging"}])


async def wait_ready(url: str) -> None:
    async with httpx2.AsyncClient(timeout=10) as http:
        with trio.fail_after(30):
            while True:
                doc = (await http.get(f"{url}/health")).json()["upstreams"][UPSTREAM]
                if doc["state"] == "ready":
                    return
                assert doc["state"] != "stopped", doc
                await trio.sleep(0.05)


@pytest.fixture(scope="module")
def suites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, SuiteRun]]:
    """One `tfunnel serve --http` with the fixture behind it, and each era's suite run against it."""
    scratch = tmp_path_factory.mktemp("conformance-breadth")
    home = scratch / "home"
    seed_home(home, seed_dir())
    expose_fixture(home)
    with gateway_http_process(home, scratch) as url:
        trio.run(wait_ready, url)
        yield {version: run_conformance_suite(f"{url}/mcp", spec_version=version, out_dir=scratch / version,
                                              expected_failures=BASELINE, timeout_s=240)
               for version in sorted({era(s, v) for s, v in SCENARIOS})}


@pytest.mark.parametrize(("scenario", "spec_version"), SCENARIOS,
                         ids=[f"{s}@{v or 'default'}" for s, v in SCENARIOS])
def test_conformance_breadth(suites: dict[str, SuiteRun], scenario: str, spec_version: str | None) -> None:
    run = suites[era(scenario, spec_version)]
    assert scenario in run.results, f"{scenario} did not run at {spec_version}:\n{run.stdout}"
    result = run.results[scenario]
    assert result.checks and all(check.status in KNOWN_STATUSES for check in result.checks), result.summary()
    assert any(check.status == SUCCESS for check in result.checks), result.summary()
    assert not result.with_status(FAILURE, WARNING), result.summary()
