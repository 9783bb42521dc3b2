"""http hooks, the process-level part: a real `tfunnel call` process with a whole environment of
its own, whose stderr and stdout (everything the process writes, not only its log) and the audit
log never carry a header secret or the URL's query. The rest is tests/test_gate_http_hooks.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.hooks import HookServer, http_hook, pre_output, set_hooks
from tests.wire import gateway_argv

pytestmark = pytest.mark.timeout(90)


def test_header_secrets_never_reach_the_logs_or_the_audit_log(home: Path) -> None:
    """The server gets the allowed variable's value (an unlisted one empty); stderr and the audit
    log name the hook and the URL without its query, never a header value or the query."""
    (home / "logs").mkdir(exist_ok=True)
    (home / "logs" / "log.config.json").write_text(json.dumps({"enabled": True}))

    def answer(path: str, payload: Any) -> tuple[int, bytes, float]:
        if payload["tool_input"].get("text") == "deny me":
            return 200, json.dumps(pre_output("deny", "no")).encode(), 0.0
        return 500, b"", 0.0

    with HookServer(answer) as server:
        set_hooks(home, http_hook(server.url + "?key=QUERYSECRET", id="policy/http",
                                  headers={"Authorization": "Bearer ${HOOK_TOKEN}", "X-Home": "$HOME"},
                                  allowedEnvVars=["HOOK_TOKEN"]))
        env = {"HOOK_TOKEN": "s3cr3t-token", "PATH": "/usr/bin:/bin", "HOME": "/home/someone"}
        outputs = [subprocess.run(gateway_argv(home, "call", "hash", json.dumps({"text": t})), env=env,
                                  capture_output=True, text=True, timeout=30) for t in ("fine", "deny me")]
    assert [o.returncode for o in outputs] == [0, 1], outputs[1].stderr
    headers = server.requests[0][1]
    assert headers["Authorization"] == "Bearer s3cr3t-token" and headers["X-Home"] == ""
    logs = outputs[0].stderr + outputs[1].stderr + outputs[0].stdout + outputs[1].stdout
    assert f"{server.url} answered HTTP 500" in logs and "policy/http" in logs
    audit = (home / "logs" / "toolfunnel.log.jsonl").read_text()
    assert '"hook": "policy/http"' in audit or '"hook":"policy/http"' in audit
    for secret in ("s3cr3t-token", "QUERYSECRET"):
        assert secret not in logs and secret not in audit
