"""Prompts, resources, templates and completion of a real upstream we did not write
(`@modelcontextprotocol/server-everything`, npm) through tfunnel, to the official SDK client in
both eras: what a client gets directly, it gets through tfunnel, under the surface's names
(prompts `everything_<name>`; resource URIs unique, so kept)."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client
from mcp.types import PromptReference, ResourceTemplateReference

from tests.test_real_upstreams import EVERYTHING_SERVER, direct, everything_upstream, write_expose
from tests.test_sdk_stdio import sdk_client

pytestmark = pytest.mark.timeout(120)

ERAS = ["legacy", "2026-07-28"]
PROMPT_ARGS: dict[str, dict[str, str]] = {
    "simple-prompt": {},
    "args-prompt": {"city": "Lisbon", "state": "LX"},
    "resource-prompt": {"resourceType": "Text", "resourceId": "3"},
}
TEMPLATE_READS = ["demo://resource/dynamic/text/7", "demo://resource/dynamic/blob/2"]
COMPLETION = ("completable-prompt", {"name": "department", "value": "E"})


_CLOCK = re.compile(r"\b\d{1,2}:\d{2}:\d{2}\s?[AP]M\b")


def untimed(value: Any) -> Any:
    """`value` with clock times masked (the server stamps dynamic resources with the time)."""
    if isinstance(value, str):
        return _CLOCK.sub("<time>", value)
    if isinstance(value, dict):
        if isinstance(value.get("blob"), str):  # compared decoded: its text holds a time too
            value = {**value, "blob": base64.b64decode(value["blob"]).decode("utf-8", "replace")}
        return {k: untimed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


def dumped(model: Any) -> dict[str, Any]:
    """A result as compared: everything but `_meta` and the modern-era `resultType`/cache hints."""
    out: dict[str, Any] = untimed(model.model_dump(by_alias=True, exclude_none=True, mode="json"))
    for key in ("_meta", "resultType", "ttlMs", "cacheScope", "nextCursor"):
        out.pop(key, None)
    return out


async def snapshot(client: Client, prefix: str) -> dict[str, Any]:
    """Everything of the everything server's non-tool surface, as one client sees it; prompt names
    are asked for with `prefix`, and every resource is followed through all pages."""
    prompts = [dumped(p) for p in (await client.list_prompts()).prompts]
    resources: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        page = await client.list_resources(cursor=cursor)
        resources += [dumped(r) for r in page.resources]
        cursor = page.next_cursor
        if cursor is None:
            break
    templates = [dumped(t) for t in (await client.list_resource_templates()).resource_templates]
    got = {name: dumped(await client.get_prompt(prefix + name, args)) for name, args in PROMPT_ARGS.items()}
    uris = [r["uri"] for r in resources[:3]] + TEMPLATE_READS
    reads = {uri: dumped(await client.read_resource(uri)) for uri in uris}
    name, argument = COMPLETION
    prompt_ref = PromptReference(type="ref/prompt", name=prefix + name)
    completion = dumped(await client.complete(prompt_ref, argument))
    template = templates[0]["uriTemplate"]
    by_template = dumped(await client.complete(ResourceTemplateReference(type="ref/resource", uri=template),
                                               {"name": "resourceId", "value": "1"}))
    return {"prompts": prompts, "resources": resources, "templates": templates, "got": got,
            "reads": reads, "completion": completion, "by_template": by_template}


@pytest.mark.parametrize("mode", ERAS)
async def test_everything_prompts_resources_completion_through_tfunnel(home: Path, mode: str) -> None:
    async with direct(EVERYTHING_SERVER, "stdio") as upstream:
        want = await snapshot(upstream, "")
    assert len(want["prompts"]) >= 4 and len(want["resources"]) >= 7 and want["templates"]
    write_expose(home, [everything_upstream()])
    with trio.fail_after(90):
        async with sdk_client(home, mode=mode) as client:
            assert client.protocol_version == ("2025-11-25" if mode == "legacy" else mode)
            got = await snapshot(client, "everything_")
    assert got["prompts"] == [{**p, "name": f"everything_{p['name']}"} for p in want["prompts"]]
    for key in ("resources", "templates", "got", "reads", "completion", "by_template"):
        assert got[key] == want[key], key
