"""A config home laid out as ToolFunnel 0.6-0.8 lays it out (inventory §B, §C.7, §O.1), written
by the tests: demo tools as `node` script invokes, the `tf_*` management entries as scripts of
ToolFunnel's engine (here stubs that fail loudly: run, they would prove we ran them). Invoke paths
are spelt as ToolFunnel's own register spells them (`scripts/<file>.js`, relative to tools/;
tests/field/toolfunnel-0.6, checked by tests/test_field_toolfunnel.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# ToolFunnel's management entries (§C.7): id, and whether its register carries an inputSchema.
TF_ENTRIES = ("tf_list", "tf_tool_add", "tf_tool_set", "tf_mcp_add", "tf_mcp_set", "tf_wrap",
              "tf_hook_add", "tf_hook_set", "tf_log", "tf_pack", "tf_accept_change")
ECHO_JS = """const raw = process.env.TOOLFUNNEL_TOOL_ARGS;
let args;
try { args = JSON.parse(raw == null ? "null" : raw); } catch (e) {
  console.log(JSON.stringify({ok: false, error: "TOOLFUNNEL_TOOL_ARGS was not valid JSON: " + e.message}));
  process.exit(0);
}
console.log(JSON.stringify({ok: true, args: args, argv: process.argv.slice(2)}));
"""
# What ToolFunnel's tf-*.js would do here: require its engine, which is not in a tfunnel home.
STUB_JS = """require("./tf-env.js");
console.log(JSON.stringify({ok: false, error: "ToolFunnel's engine ran"}));
"""
TF_ENV_JS = 'throw new Error("ToolFunnel engine not found (TOOLFUNNEL_PKG)");\n'


def tf_entry(tool_id: str, **extra: Any) -> dict[str, Any]:
    script = f"scripts/{tool_id.replace('_', '-')}.js"
    entry: dict[str, Any] = {"id": tool_id, "name": tool_id, "summary": f"ToolFunnel's {tool_id}.",
                             "category": "management", "invoke": {"type": "script", "path": script}}
    if tool_id == "tf_pack":  # the one that carries a schema in ToolFunnel (§O.1), an older one
        entry["inputSchema"] = {"type": "object", "properties": {"format": {"enum": ["home", "npm"]}}}
    return {**entry, **extra}


def write_toolfunnel_home(home: Path, *, stubs: bool = True, server_name: str = "my-tools") -> Path:
    """The home; `stubs` writes the tf-*.js files (ToolFunnel ships them), else they are missing."""
    scripts = home / "tools" / "scripts"
    scripts.mkdir(parents=True)
    (scripts / "echo.js").write_text(ECHO_JS)
    tools: list[dict[str, Any]] = [
        {"id": "echo", "name": "Echo", "summary": "Returns its arguments.", "category": "demo",
         "invoke": {"type": "script", "path": "scripts/echo.js"}},
    ]
    tools += [tf_entry(tool_id) for tool_id in TF_ENTRIES]
    if stubs:
        (scripts / "tf-env.js").write_text(TF_ENV_JS)
        for tool_id in TF_ENTRIES:
            (scripts / f"{tool_id.replace('_', '-')}.js").write_text(STUB_JS)
    (home / "tools" / "tools.register.json").write_text(json.dumps(
        {"version": 1, "description": "ToolFunnel demo register", "tools": tools}, indent=2))
    (home / "mcp").mkdir()
    (home / "mcp" / "expose.json").write_text('{"version": 1, "upstreams": [], "expose": []}')
    (home / "hooks" / "scripts").mkdir(parents=True)
    (home / "hooks" / "scripts" / "example-deny-dangerous.js").write_text("process.exit(0);\n")
    (home / "hooks" / "hooks.manifest.json").write_text(json.dumps({"version": 1, "hooks": [
        {"id": "pre-tool-use/example-deny-dangerous", "event": "PreToolUse", "matcher": "*",
         "type": "command", "command": "node ${HOOKS_DIR}/scripts/example-deny-dangerous.js",
         "timeout": 10, "enabled": False}]}))
    (home / "toolfunnel.json").write_text(json.dumps({"serverName": server_name, "serverVersion": "1.0.0"}))
    return home
