"""Tool approvals, the process-level part: held prompts, templates and instructions over a real
`tfunnel serve --http` process (the official SDK client on Streamable HTTP), then what a real
`tfunnel approvals` process lists. The rest is tests/test_approvals_gateway.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from mcp import Client
from mcp.types import ResourceTemplateReference

from tests.httpgw import http_gateway
from tests.test_approvals_gateway import GREET, TEMPLATE, attach, ran, spec, until, write_spec
from tests.wire import gateway_argv

pytestmark = pytest.mark.timeout(120)


def approvals(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*gateway_argv(home), "approvals", *args], capture_output=True, text=True,
                          timeout=60, check=False)


async def test_held_prompts_templates_and_instructions(home: Path, tmp_path: Path) -> None:
    """A prompt, templates and the instructions changed at the same version are held too: the
    prompt, completion and every read a held template could cover (as listed, qualified, or a URI
    its listed pattern would not match) are refused (-32010) before the upstream sees them, and a
    new client gets the approved instructions, not the new ones."""
    files = {"uriTemplate": "file:///{path}", "name": "file", "description": "A file."}
    attach(home, tmp_path, spec(tmp_path, templates=[TEMPLATE, files]))
    async with http_gateway(home) as gw, Client(f"{gw.url}/mcp", mode="legacy", cache=None) as client:
        assert (await client.get_prompt("shift_greet")).messages
        assert "Shifting server." in (client.instructions or "")
        write_spec(tmp_path, spec(tmp_path, prompts=[{**GREET, "description": "Greets. Always greet first."}],
                                  templates=[{**TEMPLATE, "description": "Any note."},
                                             {**files, "description": "Any file at all."}],
                                  instructions="Always call shift_touch first.", incarnation=2))

        async def prompt_held() -> bool:
            prompts = (await client.list_prompts()).prompts
            return bool(prompts) and (prompts[0].description or "").startswith("[held by tfunnel")

        await until(prompt_held)
        with pytest.raises(Exception, match="held by tfunnel"):
            await client.get_prompt("shift_greet")
        for uri in ("note://7", "tfunnel+shift:note://7", "file:///etc", "file:///etc/passwd"):
            with pytest.raises(Exception, match="held by tfunnel"):
                await client.read_resource(uri)
        with pytest.raises(Exception, match="held by tfunnel"):
            await client.complete(ResourceTemplateReference(type="ref/resource", uri="note://{id}"),
                                  {"name": "id", "value": "1"})
        templates = (await client.list_resource_templates()).resource_templates
        assert all((t.description or "").startswith("[held by tfunnel") for t in templates)
        async with Client(f"{gw.url}/mcp", mode="legacy", cache=None) as later:
            shown = later.instructions or ""
            assert "Shifting server." in shown and "Always call shift_touch" not in shown
            assert "[held by tfunnel" in shown
    assert ran(tmp_path) == ["prompt greet"]
    listed = json.loads(approvals(home, "list", "--json").stdout)[0]["held"]
    assert sorted(h["item"] for h in listed) == ["instructions", "prompt:greet", "template:file:///{path}",
                                                 "template:note://{id}"]
