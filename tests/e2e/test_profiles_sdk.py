"""`tfunnel serve --profile` as a real process, through the official SDK client over its real
stdio transport: the forced profile's surface, and without the flag the profile the client's name
matches. Profiles with the gateway in-process are tests/test_profiles_sdk.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mcp import StdioServerParameters

from tests.test_profiles_sdk import META, client, make_home, names_once

pytestmark = pytest.mark.timeout(120)


def stdio(home: Path, *args: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "tfunnel", "--home", str(home), "serve", *args])


async def test_serve_profile_forces_one_profile_over_stdio(home: Path, tmp_path: Path) -> None:
    make_home(home, tmp_path / "marked")
    async with client(stdio(home, "--profile", "narrow"), "wide-app") as forced:
        assert await names_once(forced, "mock_echo") == [*META, "mock_echo"]
    async with client(stdio(home), "wide-app") as matched:
        assert "other_say" in await names_once(matched, "other_say")
