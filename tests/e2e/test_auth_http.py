"""Authentication's refusals by the `tfunnel serve` command itself, run as a real process: a
broken or mistyped `auth/auth.config.json` makes `serve --http` refuse to start (exit 1, naming
file and field) while stdio `serve` still serves; a non-loopback bind without authentication is
refused before anything listens. The authenticated HTTP service itself is tested in-process in
tests/test_auth_http.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.authserver import AUDIENCE
from tests.test_auth_http import INIT
from tests.wire import gateway_argv

pytestmark = pytest.mark.timeout(120)


def _serve(home: Path, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*gateway_argv(home), "serve", *args], input=stdin, capture_output=True,
                          timeout=60, check=False)


def test_a_broken_auth_config_refuses_http_only(home: Path) -> None:
    """An invalid auth config: `serve --http` refuses naming file and field, `check` reports it,
    stdio `serve` still serves."""
    path = home / "auth" / "auth.config.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"enabled": True, "issuer": "https://as.example", "audience": AUDIENCE,
                                "algorithms": ["HS256"]}))
    refused = _serve(home, "--http", "--port", "0")
    assert refused.returncode == 1
    stderr = refused.stderr.decode()
    assert "auth/auth.config.json: field 'algorithms[0]': 'HS256' is refused" in stderr
    assert "refusing to start" in stderr
    check = subprocess.run([*gateway_argv(home), "check"], capture_output=True, timeout=60, check=False)
    assert check.returncode == 1 and b"auth/auth.config.json: field 'algorithms[0]'" in check.stdout
    path.write_text('{"enabled": true, "issuer": ')
    assert b"auth/auth.config.json: invalid JSON" in _serve(home, "--http", "--port", "0").stderr
    line = json.dumps(INIT).encode() + b"\n"
    stdio = _serve(home, stdin=line)
    assert stdio.returncode == 0, stdio.stderr.decode()
    assert json.loads(stdio.stdout.splitlines()[0])["result"]["serverInfo"]["name"] == "tfunnel"


def test_a_non_loopback_bind_needs_authentication(home: Path) -> None:
    """`--host 0.0.0.0` without auth is refused before anything listens, naming the remedy."""
    refused = _serve(home, "--http", "--host", "0.0.0.0", "--port", "0")
    assert refused.returncode == 1
    assert b"refusing to listen on '0.0.0.0' without authentication" in refused.stderr
    assert b"auth/auth.config.json" in refused.stderr


def test_check_names_an_unknown_auth_field_and_a_malformed_url(home: Path) -> None:
    """`requiredScope` (a typo) is a problem naming the nearest field: check reports it and
    `serve --http` refuses. An unparsable issuer: check reports it, stdio still serves."""
    path = home / "auth" / "auth.config.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"enabled": True, "issuer": "https://as.example", "audience": AUDIENCE,
                                "requiredScope": ["mcp:tools"]}))
    check = subprocess.run([*gateway_argv(home), "check"], capture_output=True, timeout=60, check=False)
    assert check.returncode == 1
    assert b"field 'requiredScope': is not a known field; did you mean 'requiredScopes'?" in check.stdout
    refused = _serve(home, "--http", "--port", "0")
    assert refused.returncode == 1 and b"requiredScope" in refused.stderr
    path.write_text(json.dumps({"enabled": True, "issuer": "https://[as.example", "audience": AUDIENCE}))
    check = subprocess.run([*gateway_argv(home), "check"], capture_output=True, timeout=60, check=False)
    assert check.returncode == 1, check.stderr.decode()
    assert b"field 'issuer': is not a valid URL" in check.stdout
    stdio = _serve(home, stdin=json.dumps(INIT).encode() + b"\n")
    assert stdio.returncode == 0, stdio.stderr.decode()
    assert json.loads(stdio.stdout.splitlines()[0])["result"]["serverInfo"]["name"] == "tfunnel"
