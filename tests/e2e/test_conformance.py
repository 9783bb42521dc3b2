"""The official conformance suite (`@modelcontextprotocol/conformance` 0.2.0-alpha.12, under Node 22,
both installed by scripts/test) against `tfunnel serve --http` on a loopback port: one gateway
process for the module, each scenario a client of its own.

Scenarios run at the wire each one is scored on (legacy 2025-11-25 and/or modern 2026-07-28).
The only expected failures are the checks listed in `tests/conformance/expected-failures.yml`:
each needs one of the suite's own fixture tools, which a gateway does not have. With that
baseline the CLI also fails on any unlisted WARNING and on a listed check that now passes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.interop import EXPECTED_FAILURES_DIR, assert_passed, gateway_http_process, run_conformance_async
from tfunnel.config.home import seed_dir, seed_home

pytestmark = pytest.mark.timeout(180)

BASELINE = EXPECTED_FAILURES_DIR / "expected-failures.yml"

SCENARIOS = [
    ("server-initialize", None),
    ("server-stateless", "2026-07-28"),
    ("tools-list", None),
    ("tools-list", "2026-07-28"),
    ("caching", "2026-07-28"),
    ("dns-rebinding-protection", None),
    ("dns-rebinding-protection", "2026-07-28"),
    ("http-header-validation", "2026-07-28"),
]


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The bundled home served by one `tfunnel serve --http` for every scenario of the module."""
    scratch = tmp_path_factory.mktemp("conformance-gateway")
    seed_home(scratch / "home", seed_dir())
    with gateway_http_process(scratch / "home", scratch) as url:
        yield url


@pytest.mark.parametrize(("scenario", "spec_version"), SCENARIOS,
                         ids=[f"{s}@{v or 'default'}" for s, v in SCENARIOS])
async def test_conformance_scenario(gateway_url: str, tmp_path: Path, scenario: str, spec_version: str | None,
                                    ) -> None:
    result = await run_conformance_async(f"{gateway_url}/mcp", scenario, out_dir=tmp_path / "results",
                                         spec_version=spec_version, expected_failures=BASELINE,
                                         timeout_s=150)
    assert_passed(result, scenario, spec_version)
