"""Prompts, resources, templates and completion of a real upstream we did not write
(`@modelcontextprotocol/server-everything`, npm) through tfunnel, to the official SDK client in
both eras: what a client gets directly, it gets through tfunnel, under the surface's names
(prompts `everything_<name>`; resource URIs unique, so kept)."""

from __future__ import annotations

import base64
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client
from mcp.types import PromptReference, ResourceTemplateReference

from tests.e2e.test_interop_setup import free_port
from tests.e2e.test_real_upstreams import direct
from tests.e2e.test_sdk_stdio import sdk_client
from tests.test_modern_stdio import modern
from tests.upstreams import EVERYTHING_SERVER, everything_upstream, write_expose
from tests.wire import gateway, loopback_server
from tfunnel.route.methods import INSTRUCTIONS
from tfunnel.surface.instructions import TRIM_MARKER, clean
from tfunnel.testing.sdk import payload

pytestmark = pytest.mark.timeout(120)

ERAS = ["legacy", "2026-07-28"]
PROMPT_ARGS: dict[str, dict[str, str]] = {
    "simple-prompt": {},
    "args-prompt": {"city": "Lisbon", "state": "LX"},
    "resource-prompt": {"resourceType": "Text", "resourceId": "3"},
    "completable-prompt": {"department": "Engineering", "name": "Alice"},
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
    assert {p["name"] for p in prompts} == {prefix + name for name in PROMPT_ARGS}  # each one is got
    uris = [r["uri"] for r in resources] + TEMPLATE_READS
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


async def test_list_tools_lists_the_prompts_and_resources_of_everything(home: Path) -> None:
    """toolfunnel_list_tools with `kind` lists what the upstream offers, under the surface's
    names, and narrows it like tools."""
    async with direct(EVERYTHING_SERVER, "stdio") as upstream:
        prompts = (await upstream.list_prompts()).prompts
        templates = (await upstream.list_resource_templates()).resource_templates
        first_page = (await upstream.list_resources()).resources
    write_expose(home, [everything_upstream()])
    with trio.fail_after(90):
        async with sdk_client(home) as client:
            listed = payload(await client.call_tool("toolfunnel_list_tools", {"kind": "prompts"}))
            found = await client.call_tool("toolfunnel_list_tools", {"kind": "resources", "limit": 500})
            narrowed = payload(await client.call_tool("toolfunnel_list_tools",
                                                      {"kind": "prompts", "filter": "args-prompt"}))
    assert [p["name"] for p in listed] == [f"everything_{p.name}" for p in prompts]
    args_prompt = next(p for p in prompts if p.name == "args-prompt")
    assert narrowed == [{"name": "everything_args-prompt", "title": args_prompt.title or "args-prompt",
                         "summary": args_prompt.description or "", "upstream": "everything",
                         "arguments": [a.name for a in args_prompt.arguments or []]}]
    structured = found.structured_content
    assert structured is not None
    uris = [r["uri"] for r in structured["resources"]]
    assert [r.uri for r in first_page] == uris[:len(first_page)]
    assert all(r["upstream"] == "everything" for r in structured["resources"])
    assert [t["uriTemplate"] for t in structured["resourceTemplates"]] == [t.uri_template for t in templates]


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_server_instructions_carry_the_upstreams_own(home: Path, mode: str) -> None:
    """A ready upstream's instructions (everything sends some) get a section of their own, after
    the base text, cleaned and trimmed to the configured cap."""
    async with direct(EVERYTHING_SERVER, "stdio") as upstream:
        theirs = upstream.instructions
    assert theirs and "\n## " in theirs  # long, and with headings of its own
    write_expose(home, [{**everything_upstream(), "description": "The MCP reference server."}])
    (home / "toolfunnel.json").write_text('{"upstreamInstructionsMaxChars": 200}')
    with trio.fail_after(90):
        async with gateway(home) as wire:
            if mode == "legacy":
                text = (await wire.initialize())["result"]["instructions"]
            else:
                text = (await wire.request(1, "server/discover", modern()))["result"]["instructions"]
    assert text.startswith(INSTRUCTIONS)
    heading = "## Upstream `everything`\n\nThe MCP reference server.\n\n"
    assert heading in text
    section = text.split(heading, 1)[1]
    assert not any(line.startswith("#") for line in section.splitlines())
    cleaned = clean(theirs)
    if len(cleaned) > 200:
        assert section.endswith(TRIM_MARKER)
        assert cleaned.startswith(section[:-len(TRIM_MARKER)])
        assert len(section) <= 200 + len(TRIM_MARKER)
    else:
        assert section == cleaned


@asynccontextmanager
async def everything_over_http() -> AsyncIterator[str]:
    """server-everything in its own Streamable HTTP mode on a loopback port; yields its /mcp URL."""
    port = free_port()
    async with loopback_server([str(EVERYTHING_SERVER), "streamableHttp"], port, {"PORT": str(port)}):
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.mark.parametrize("mode", ERAS)
async def test_everything_as_a_remote_http_upstream_gives_the_same(home: Path, mode: str) -> None:
    """The same server, reached by tfunnel as a remote Streamable HTTP upstream: the same prompts,
    resources, templates, reads and completions as a direct client gets over stdio."""
    async with direct(EVERYTHING_SERVER, "stdio") as upstream:
        want = await snapshot(upstream, "")
    async with everything_over_http() as url:
        write_expose(home, [{"id": "everything", "transport": "http", "url": url}])
        with trio.fail_after(90):
            async with sdk_client(home, mode=mode) as client:
                got = await snapshot(client, "everything_")
    assert got["prompts"] == [{**p, "name": f"everything_{p['name']}"} for p in want["prompts"]]
    for key in ("resources", "templates", "got", "reads", "completion", "by_template"):
        assert got[key] == want[key], key
