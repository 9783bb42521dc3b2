"""The conformance fixture's verification record (`tests/conformance/fixture-verified.json`) is of
the fixture as it is: the suite's scenarios ran clean against these bytes, under this suite
version, for these scenarios. The runs themselves happen once per change of any of them
(`tests/e2e/test_conformance_fixture.py`); this catches a change that was not verified."""

from __future__ import annotations

import json

from tests.e2e.test_conformance_fixture import RECORD, VERIFY_ENV, fixture_record


def test_the_fixture_was_verified_as_it_is_now() -> None:
    """Digest, suite version and scenario list all match the last verification."""
    recorded = json.loads(RECORD.read_text())
    verified = recorded.pop("verified")
    assert recorded == fixture_record(), (
        f"the conformance fixture, the suite or its scenarios changed since {verified}: verify it with "
        f"`{VERIFY_ENV}=1 scripts/test tests/e2e/test_conformance_fixture.py` (it rewrites {RECORD.name})")
