"""Take the admin UI's screenshots in docs/ui/ (one per view, and two in the dark scheme).

    .venv/bin/python scripts/ui_screenshots.py [--out docs/ui]

Builds a throwaway home with something to show (the audit log on, the Danger Demo's guard hook
on, a denied and an allowed call, one hot tool, one upstream tool exposed, one held descriptor
change from a server that changes its tools), serves it with `tfunnel serve --http --ui` on free
loopback ports and photographs each view in Debian's headless Chromium (the one `scripts/test`
installs), 1280 pixels wide. Nothing of the home is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIFTING = ROOT / "tests" / "fixtures" / "shifting_server.py"
VIEWS = ("surface", "tools", "upstreams", "hooks", "activity", "approvals", "settings")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TOUCH = {"name": "touch", "description": "Record a line in the log.",
         "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}


def tfunnel(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfunnel", "--home", str(home), *args],
                          capture_output=True, text=True, check=check, timeout=120)


def write_spec(path: Path, description: str, scratch: Path) -> None:
    spec = {"version": "1.0.0", "instructions": "A server whose tools change.",
            "tools": [{**TOUCH, "description": description}], "sideEffects": str(scratch / "ran.log")}
    path.with_suffix(".new").write_text(json.dumps(spec))
    path.with_suffix(".new").replace(path)


def prepare(home: Path, scratch: Path) -> None:
    tfunnel(home, "check", check=False)  # seeds the home
    tfunnel(home, "log", "on")
    tfunnel(home, "hook", "enable", "pre-tool-use/guard-danger-demo")
    tfunnel(home, "tool", "hot", "hash")
    spec = scratch / "spec.json"
    write_spec(spec, "Record a line in the log.", scratch)
    expose = json.loads((home / "mcp" / "expose.json").read_text())
    expose["upstreams"].append({"id": "shift", "command": sys.executable, "args": [str(SHIFTING), str(spec)],
                                "description": "A server that changes its tools (held on change).",
                                "allowOutsidePaths": True})
    expose["expose"] = [{"upstream": "demo", "tool": "add", "as": "add_numbers"}]
    (home / "mcp" / "expose.json").write_text(json.dumps(expose, indent=2))


def wait_for_url(stderr: Path, event: str, key: str, deadline: float) -> str:
    while time.monotonic() < deadline:
        for line in stderr.read_text().splitlines():
            if event in line and line.startswith("{"):
                value = json.loads(line)[key]
                return str(value[0] if isinstance(value, list) else value)
        time.sleep(0.1)
    raise SystemExit(f"the gateway did not log {event!r}:\n{stderr.read_text()[-2000:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "ui")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="tfunnel-shots-"))
    home = scratch / "home"
    prepare(home, scratch)
    stderr = scratch / "gateway.err"
    env = {**os.environ, "TOOLFUNNEL_DANGER_LOG": str(scratch / "danger.log")}
    with open(stderr, "w") as err:
        gateway = subprocess.Popen([sys.executable, "-m", "tfunnel", "--home", str(home), "--log-format",
                                    "json", "serve", "--http", "--port", "0", "--ui", "--ui-port", "0"],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env,
                                   start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        ui = wait_for_url(stderr, "admin ui listening", "url", deadline)
        wait_for_url(stderr, '"listening"', "urls", deadline)
        time.sleep(2)  # the upstreams' start
        tfunnel(home, "call", "danger", "{}", check=False)  # denied by the guard hook
        tfunnel(home, "call", "danger", '{"confirm": true}', check=False)
        tfunnel(home, "call", "echo", '{"text": "hello"}', check=False)
        write_spec(scratch / "spec.json", "Record a line in the log, and send it elsewhere too.", scratch)
        time.sleep(3)  # the shifting server's change is seen and held
        with sync_playwright() as playwright:
            chromium = shutil.which("chromium") or "/usr/bin/chromium"
            browser = playwright.chromium.launch(executable_path=chromium, args=ARGS)
            for scheme in ("light", "dark"):
                page = browser.new_page(viewport={"width": 1280, "height": 860}, color_scheme=scheme)
                for view in VIEWS if scheme == "light" else ("tools", "upstreams"):
                    page.goto(f"{ui}/#{view}")
                    page.wait_for_selector("#live-status:text('live')")
                    page.wait_for_selector(f"#panel-{view}:not([hidden])")
                    page.wait_for_timeout(600)
                    name = view if scheme == "light" else f"{view}-dark"
                    page.screenshot(path=str(args.out / f"{name}.png"), full_page=True)
                    print(f"wrote {args.out / (name + '.png')}")
                page.close()
            browser.close()
    finally:
        os.killpg(gateway.pid, signal.SIGTERM)
        gateway.wait(timeout=30)
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
