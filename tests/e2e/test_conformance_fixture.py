"""Every server scenario of the official conformance suite (`@modelcontextprotocol/conformance`
0.2.0-alpha.12, under Node 22) against `tests/fixtures/conformance_server.py`, the suite's fixtures
on the dual-era mcp SDK, over Streamable HTTP on a free loopback port.

The fixture also serves stdio (both eras), as a gateway runs it as an upstream.

`SUITE_TOOLS` and the rest are the names the scenarios call; the target must list them all (some
checks accept any text block, an "Unknown tool" error result included).

`SCENARIOS` is each scenario the suite applies to 2025-11-25 (run over the initialize handshake)
and each it applies to 2026-07-28 (run stateless), a scenario of both eras once per era; the
optional extensions (tasks, skills) are left out (see the baseline). The baseline is empty: any
FAILURE or WARNING fails, and so does a SKIPPED check (something the scenario could not exercise).

The server under test comes from `target`, a module-scoped fixture over `TARGETS`: each entry
names a factory that, given a scratch directory, is a context manager yielding the URL to test.
The same scenarios run against another server (such as a gateway wrapping this fixture) by adding
one entry there. Each target is started once for the whole module, and each era's scenarios run
against it as one suite run (`--suite all --spec-version V`, one Node process per era): each
scenario's test reads its own checks from that run, and `test_each_era_passes_as_one_run` holds
the CLI's own verdict on the whole era (its exit status under the empty baseline).

The fixture itself is verified once per change of it, not on every run: with
`TFUNNEL_VERIFY_CONFORMANCE_FIXTURE=1` the `fixture` target joins `TARGETS`, and once every
scenario passed against it, its teardown writes `tests/conformance/fixture-verified.json` (the
fixture's digest, the suite's version, the scenarios). `tests/test_conformance_record.py` fails
whenever the fixture, the suite or the scenarios no longer match that record. Every run tests the
gateway wrapping it (`wrapped`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.types import TextContent

from tests.interop import (
    CONFORMANCE_FIXTURE,
    CONFORMANCE_VERSION,
    EXPECTED_FAILURES_DIR,
    INFO,
    LEGACY_ERA,
    MODERN_ERA,
    SUCCESS,
    ConformanceResult,
    SuiteRun,
    conformance_fixture_http,
    conformance_server_scenarios,
    run_conformance_suite,
    wrapped_conformance_fixture,
)

BASELINE = EXPECTED_FAILURES_DIR / "expected-failures-none.yml"
# What tfunnel does not yet carry through a wrap, by scenario, with why (to shrink to nothing).
WRAP_GAPS: dict[str, str] = {
    # tfunnel answers a POST with JSON when it has nothing to stream first, and does not offer
    # SSE resumability (SEP-1699): the scenario has nothing to check (exit 0, INFO only).
    "server-sse-polling": "Server returned JSON instead of SSE stream",
}

# The suite's server scenarios for each era, as `conformance list` tags them (pending ones included).
LEGACY_SCENARIOS = [
    "server-initialize", "server-session-lifecycle", "logging-set-level", "ping", "completion-complete",
    "tools-list", "tools-call-simple-text", "tools-call-image", "tools-call-audio",
    "tools-call-embedded-resource", "tools-call-mixed-content", "tools-call-with-logging",
    "tools-call-error", "tools-call-with-progress", "tools-call-sampling", "tools-call-elicitation",
    "json-schema-2020-12", "elicitation-sep1034-defaults", "server-sse-polling",
    "server-sse-multiple-streams", "elicitation-sep1330-enums", "resources-list", "resources-read-text",
    "resources-read-binary", "resources-templates-read", "resources-subscribe", "resources-unsubscribe",
    "prompts-list", "prompts-get-simple", "prompts-get-with-args", "prompts-get-embedded-resource",
    "prompts-get-with-image", "dns-rebinding-protection",
]
MODERN_SCENARIOS = [
    "server-stateless", "completion-complete", "tools-list", "tools-call-simple-text", "tools-call-image",
    "tools-call-audio", "tools-call-embedded-resource", "tools-call-mixed-content", "tools-call-error",
    "tools-call-with-progress", "json-schema-2020-12", "server-sse-multiple-streams", "resources-list",
    "resources-read-text", "resources-read-binary", "resources-templates-read",
    "sep-2164-resource-not-found", "prompts-list", "prompts-get-simple", "prompts-get-with-args",
    "prompts-get-embedded-resource", "prompts-get-with-image", "dns-rebinding-protection", "caching",
    "http-header-validation", "http-custom-header-server-validation",
    "input-required-result-basic-elicitation", "input-required-result-basic-sampling",
    "input-required-result-basic-list-roots", "input-required-result-request-state",
    "input-required-result-multiple-input-requests", "input-required-result-multi-round",
    "input-required-result-missing-input-response", "input-required-result-non-tool-request",
    "input-required-result-result-type", "input-required-result-unsupported-methods",
    "input-required-result-tampered-state", "input-required-result-capability-check",
    "input-required-result-ignore-extra-params", "input-required-result-validate-input",
]
# (scenario, --spec-version): always explicit, so each run's era is the one named.
SCENARIOS: list[tuple[str, str]] = [*((s, LEGACY_ERA) for s in LEGACY_SCENARIOS),
                                    *((s, MODERN_ERA) for s in MODERN_SCENARIOS)]

# What the scenarios call by name (the suite's spelling). Some checks pass on any text block, an
# "Unknown tool" error included, so the names are checked apart from the scenarios.
SUITE_TOOLS = {
    "test_simple_text", "test_image_content", "test_audio_content", "test_embedded_resource",
    "test_multiple_content_types", "test_error_handling", "test_tool_with_logging", "test_tool_with_progress",
    "test_sampling", "test_elicitation", "test_elicitation_sep1034_defaults",
    "test_elicitation_sep1330_enums",
    "test_reconnection", "test_missing_capability", "test_streaming_elicitation", "test_logging_tool",
    "test_trigger_tool_change", "test_trigger_prompt_change", "json_schema_2020_12_tool",
    *(f"test_input_required_result_{name}" for name in (
        "elicitation", "sampling", "list_roots", "request_state", "multiple_inputs", "multi_round",
        "tampered_state", "capabilities")),
}
SUITE_PROMPTS = {"test_simple_prompt", "test_prompt_with_arguments", "test_prompt_with_embedded_resource",
                 "test_prompt_with_image", "test_input_required_result_prompt"}
SUITE_RESOURCES = {"test://static-text", "test://static-binary", "test://watched-resource"}
SUITE_TEMPLATES = {"test://template/{id}/data"}

# A factory: given a scratch directory (for logs), a context manager yielding the URL under test.
Target = Callable[[Path], AbstractContextManager[str]]
VERIFY_ENV = "TFUNNEL_VERIFY_CONFORMANCE_FIXTURE"
VERIFYING = os.environ.get(VERIFY_ENV) == "1"
RECORD = EXPECTED_FAILURES_DIR / "fixture-verified.json"
TARGETS: dict[str, Target] = {
    # tfunnel wrapping the fixture (a stdio upstream): the same scenarios, the same empty baseline.
    "wrapped": wrapped_conformance_fixture,
    # The fixture alone: only when verifying it (see the module's docstring).
    **({"fixture": conformance_fixture_http} if VERIFYING else {}),
}
# Scenario ids (`scenario@version`) that passed, per target, for the verification record.
PASSED: dict[str, set[str]] = {name: set() for name in TARGETS}


def scenario_ids() -> list[str]:
    return [f"{s}@{v}" for s, v in SCENARIOS]


def fixture_record() -> dict[str, Any]:
    """What the verification record says of the fixture as it is now."""
    return {"fixture": CONFORMANCE_FIXTURE.relative_to(EXPECTED_FAILURES_DIR.parents[1]).as_posix(),
            "sha256": hashlib.sha256(CONFORMANCE_FIXTURE.read_bytes()).hexdigest(),
            "suite": f"@modelcontextprotocol/conformance@{CONFORMANCE_VERSION}",
            "scenarios": scenario_ids()}


@pytest.fixture(scope="module", params=sorted(TARGETS))
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of the server under test, started once per module for each `TARGETS` entry; the
    fixture's verification record is written once every scenario passed against it."""
    name: str = request.param
    with TARGETS[name](tmp_path_factory.mktemp(f"target-{name}")) as url:
        yield url
    if name == "fixture" and PASSED[name] == set(scenario_ids()):
        RECORD.write_text(json.dumps({**fixture_record(), "verified": time.strftime("%Y-%m-%d")},
                                     indent=2) + "\n")


class Suites:
    """Each era's suite run against one target, made at its first use."""

    def __init__(self, url: str, scratch: Path) -> None:
        self._url = url
        self._scratch = scratch
        self._runs: dict[str, SuiteRun] = {}

    def era(self, version: str) -> SuiteRun:
        if version not in self._runs:
            self._runs[version] = run_conformance_suite(self._url, spec_version=version,
                                                        out_dir=self._scratch / version,
                                                        expected_failures=BASELINE, timeout_s=240)
        return self._runs[version]


@pytest.fixture(scope="module")
def suites(target: str, tmp_path_factory: pytest.TempPathFactory) -> Suites:
    """The target's suite runs, shared by the module's tests."""
    return Suites(target, tmp_path_factory.mktemp("suites"))


def error_results(value: Any) -> Iterator[Any]:
    """Every object with `isError: true` inside a check's details (a tool result that failed)."""
    if isinstance(value, dict):
        if value.get("isError") is True:
            yield value
        for item in value.values():
            yield from error_results(item)
    elif isinstance(value, list):
        for item in value:
            yield from error_results(item)


def assert_clean(result: ConformanceResult) -> None:
    """Ran, something passed, nothing failed, warned or was skipped, no status the suite does not
    define; and no tool call failed where none should. Some checks accept any text block, so an
    `isError` result ("Unknown tool: test_simple_text") would pass them by accident. (The exit
    status is the era's, held by `test_each_era_passes_as_one_run`.)"""
    assert result.checks, result.summary()
    assert result.passed, result.summary()
    assert all(check.status in (SUCCESS, INFO) for check in result.checks), result.summary()
    if result.scenario != "tools-call-error":
        failed = [(check.id, error) for check in result.checks for error in error_results(check.details)]
        assert not failed, f"{result.scenario}: a tool call failed: {failed}"


@pytest.mark.timeout(60)
def test_scenarios_are_every_server_scenario_of_both_eras() -> None:
    """`SCENARIOS` is what the installed suite lists for each era, extensions aside."""
    listed = conformance_server_scenarios()
    assert listed[LEGACY_ERA] == LEGACY_SCENARIOS
    assert listed[MODERN_ERA] == MODERN_SCENARIOS
    assert listed["extension"], "the suite lists its extension scenarios apart"
    assert not set(listed["extension"]) & {s for s, _ in SCENARIOS}


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("mode", "version"), [("legacy", LEGACY_ERA), (MODERN_ERA, MODERN_ERA)])
async def test_the_target_serves_every_name_the_suite_calls(target: str, mode: str, version: str) -> None:
    with trio.fail_after(60):
        async with Client(target, mode=mode, cache=None) as client:
            assert client.protocol_version == version
            tools = {tool.name for tool in (await client.list_tools()).tools}
            prompts = {prompt.name for prompt in (await client.list_prompts()).prompts}
            resources = {str(resource.uri) for resource in (await client.list_resources()).resources}
            templates = {template.uri_template
                         for template in (await client.list_resource_templates()).resource_templates}
    assert SUITE_TOOLS - tools == set()
    assert SUITE_PROMPTS - prompts == set()
    assert SUITE_RESOURCES - resources == set()
    assert SUITE_TEMPLATES - templates == set()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("version", [LEGACY_ERA, MODERN_ERA])
def test_each_era_passes_as_one_run(suites: Suites, version: str) -> None:
    """The CLI's verdict on the era: exactly `SCENARIOS`' scenarios of that era ran, in the suite's
    order, and it exits 0 under the empty baseline (nothing failed or warned, nothing stale)."""
    run = suites.era(version)
    assert run.scenarios == [s for s, v in SCENARIOS if v == version], run.stdout
    assert run.exit_status == 0, run.summary()


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("scenario", "spec_version"), SCENARIOS,
                         ids=[f"{s}@{v}" for s, v in SCENARIOS])
def test_conformance_scenario(request: pytest.FixtureRequest, suites: Suites, scenario: str,
                              spec_version: str) -> None:
    name = request.node.callspec.params["target"]
    gap = WRAP_GAPS.get(scenario) if name == "wrapped" else None
    run = suites.era(spec_version)
    assert scenario in run.results, f"{scenario} did not run at {spec_version}:\n{run.stdout}"
    result = run.results[scenario]
    if gap is None:
        assert_clean(result)
        PASSED[name].add(f"{scenario}@{spec_version}")
        return
    # A known gap of the wrap: the suite's own verdict (nothing failed or warned), and nothing
    # to check for the reason written down.
    assert all(check.status == INFO for check in result.checks), result.summary()
    assert any(gap in str(check.details) for check in result.checks), result.summary()


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("mode", "version"), [("legacy", LEGACY_ERA), (MODERN_ERA, MODERN_ERA)])
async def test_the_fixture_serves_stdio_in_both_eras(mode: str, version: str) -> None:
    """Over stdio the fixture speaks the initialize handshake and the 2026-07-28 wire, with the
    suite's names under `--prefix test_`."""
    server = StdioServerParameters(command=sys.executable,
                                   args=[str(CONFORMANCE_FIXTURE), "--prefix", "test_"])
    with trio.fail_after(60):
        async with Client(server, mode=mode, cache=None) as client:
            assert client.protocol_version == version
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"test_simple_text", "test_missing_capability", "json_schema_2020_12_tool"} <= names
            result = await client.call_tool("test_simple_text", {})
            assert result.content == [TextContent(type="text",
                                                  text="This is a simple text response for testing.")]
