"""The admin UI in a real headless Chromium, against a real `tfunnel serve --http --ui`, with the
official SDK client connected to the same gateway: what the page does reaches the client, what
happens in the gateway reaches the page without a reload."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from mcp import Client

from tests.browser import Browser, browser
from tests.conftest import add_tools
from tests.uigw import Ui, ui_gateway

pytestmark = pytest.mark.timeout(150)
VIEWS = ("surface", "tools", "upstreams", "hooks", "activity", "approvals", "settings")


async def open_view(b: Browser, ui: Ui, view: str) -> None:
    await b.do(lambda page: page.goto(f"{ui.url}/#{view}"))
    await b.do(lambda page: page.wait_for_selector("#live-status:text('live')"))
    await b.do(lambda page: page.wait_for_selector(f"#panel-{view}:not([hidden])"))


async def appears(b: Browser, selector: str) -> None:
    await b.do(lambda page: page.wait_for_selector(selector))


async def mark_page(b: Browser) -> None:
    """A value that only survives while the page is not reloaded."""
    await b.do(lambda page: page.evaluate("window.__notReloaded = 42"))


async def still_marked(b: Browser) -> bool:
    return bool(await b.do(lambda page: page.evaluate("window.__notReloaded === 42")))


async def names(client: Client) -> list[str]:
    return [t.name for t in (await client.list_tools()).tools]


async def test_a_hot_toggle_in_the_page_reaches_a_connected_sdk_client(home: Path) -> None:
    async with ui_gateway(home) as ui, browser() as b:
        assert ui.gateway is not None
        async with Client(f"{ui.gateway.url}/mcp", mode="legacy", cache=None) as client:
            assert "echo" not in await names(client)
            await open_view(b, ui, "tools")
            box = 'tr[data-tool="echo"] input[data-axis="hot"]'
            assert await b.do(lambda page: page.is_checked(box)) is False
            await b.do(lambda page: page.click(box))
            await b.do(lambda page: page.wait_for_selector(f"{box}:checked"))
            with trio.fail_after(10):
                while "echo" not in await names(client):
                    await trio.sleep(0.1)
        assert b.console == []


async def test_a_killed_upstream_changes_state_on_the_page_without_a_reload(home: Path) -> None:
    async with ui_gateway(home) as ui, browser() as b, httpx2.AsyncClient(timeout=10) as http:
        demo = {u["id"]: u for u in (await ui.view(http, "upstreams"))["upstreams"]}["demo"]
        assert demo["state"] == "ready"
        await open_view(b, ui, "upstreams")
        row = 'tr[data-upstream="demo"]'
        assert await b.do(lambda page: page.inner_text(f"{row} .upstream-state")) == "ready"
        await mark_page(b)
        os.kill(demo["pid"], signal.SIGKILL)
        # The page hears of the crash and shows the state the supervisor has: not ready, or a
        # new process already (a fast restart), never the old pid as ready.
        await b.do(lambda page: page.wait_for_function(
            "([row, pid]) => { const r = document.querySelector(row); return r !== null && "
            "(r.querySelector('.upstream-state').textContent !== 'ready' || !r.textContent.includes(pid)); }",
            arg=[row, str(demo["pid"])]), timeout=30)
        assert await still_marked(b)
        assert b.console == []


async def test_a_deny_shows_up_in_activity_live(home: Path) -> None:
    async with ui_gateway(home) as ui, browser() as b, httpx2.AsyncClient(timeout=10) as http:
        assert ui.gateway is not None
        assert (await ui.op(http, "tf_log", {"action": "enable"}))["ok"] is True
        guard = "pre-tool-use/guard-danger-demo"
        assert (await ui.op(http, "tf_hook_set", {"id": guard, "action": "enable"}))["ok"] is True
        await open_view(b, ui, "activity")
        await mark_page(b)
        async with Client(f"{ui.gateway.url}/mcp", mode="legacy", cache=None) as client:
            denied = await client.call_tool("toolfunnel_run_tool", {"name": "danger", "args": {}})
            assert denied.is_error
        deny = '#activity-list [data-record][data-decision="deny"]'
        await b.do(lambda page: page.wait_for_selector(deny))
        text = await b.do(lambda page: page.inner_text(deny))
        assert "danger" in text
        assert await still_marked(b)
        # The filter keeps the deny and drops what is not one.
        await b.do(lambda page: page.select_option("#activity-filter", "deny"))
        await b.do(lambda page: page.wait_for_function(
            "() => { const rows = [...document.querySelectorAll('#activity-list [data-record]')]; "
            "return rows.length > 0 && rows.every(r => r.dataset.decision === 'deny' || "
            "r.dataset.type === 'tool'); }"))
        assert b.console == []


BLOCKER = """import sys
print("blocked from the admin page", file=sys.stderr)
sys.exit(2)
"""


async def test_a_hook_added_from_the_page_blocks_the_call(home: Path, tmp_path: Path) -> None:
    marker = tmp_path / "danger.log"  # the Danger Demo's one effect: a line in this file
    async with ui_gateway(home, {"TOOLFUNNEL_DANGER_LOG": str(marker)}) as ui, browser() as b:
        assert ui.gateway is not None
        async with Client(f"{ui.gateway.url}/mcp", mode="legacy", cache=None) as client:
            ran = await client.call_tool("toolfunnel_run_tool", {"name": "danger", "args": {"n": 1}})
            assert not ran.is_error and marker.exists()  # without a hook it runs
            marker.unlink()
            await open_view(b, ui, "hooks")
            form = "form#hook-add-form"

            def fill(page: Any) -> None:
                page.fill(f'{form} [name="id"]', "pre-tool-use/block-danger")
                page.select_option(f'{form} [name="event"]', "PreToolUse")
                page.fill(f'{form} [name="matcher"]', "danger")
                page.fill(f'{form} [name="script"]', "block_danger.py")
                page.fill(f'{form} [name="scriptText"]', BLOCKER)
                page.click(f'{form} [type="submit"]')

            await b.do(fill)
            await b.do(lambda page: page.wait_for_selector('tr[data-hook="pre-tool-use/block-danger"]'))
            assert (home / "hooks" / "scripts" / "block_danger.py").read_text() == BLOCKER
            blocked = await client.call_tool("toolfunnel_run_tool", {"name": "danger", "args": {"n": 2}})
            assert blocked.is_error
            assert "blocked from the admin page" in str(blocked.content)
            assert not marker.exists()  # denied: the tool never ran
        assert b.console == []


async def test_a_failed_action_shows_the_operations_error(home: Path) -> None:
    async with ui_gateway(home) as ui, browser() as b:
        await open_view(b, ui, "tools")
        form = "form#tool-add-form"

        def add_echo_again(page: Any) -> None:
            page.click("#panel-tools details > summary")  # the form is folded away until wanted
            page.fill(f'{form} [name="id"]', "echo")
            page.fill(f'{form} [name="name"]', "Echo again")
            page.click(f'{form} [type="submit"]')

        await b.do(add_echo_again)
        await b.do(lambda page: page.wait_for_selector("#toast:not(:empty)"))
        shown = await b.do(lambda page: page.inner_text("#toast"))
        assert "echo" in shown and "already" in shown


def luminance(css: str) -> float:
    """0..255 from an `rgb(r, g, b)` / `rgba(...)` computed colour."""
    r, g, b = (float(part) for part in css[css.index("(") + 1:css.index(")")].split(",")[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


async def test_every_view_renders_without_errors_by_keyboard_in_both_schemes(home: Path) -> None:
    """The tabs are reached with the arrow keys (focus follows, each panel shows), and the page
    follows the system's light or dark preference; no view logs an error or a CSP violation."""
    backgrounds = {}
    for scheme in ("light", "dark"):
        async with ui_gateway(home) as ui, browser(color_scheme=scheme) as b:
            await open_view(b, ui, "surface")
            await b.do(lambda page: page.focus("#tab-surface"))
            for view in VIEWS[1:]:
                await b.do(lambda page: page.keyboard.press("ArrowRight"))
                await appears(b, f'#tab-{view}[aria-selected="true"]:focus')
                await appears(b, f"#panel-{view}:not([hidden])")
            await b.do(lambda page: page.keyboard.press("Home"))
            await b.do(lambda page: page.wait_for_selector('#tab-surface[aria-selected="true"]:focus'))
            backgrounds[scheme] = luminance(await b.do(lambda page: page.evaluate(
                "getComputedStyle(document.body).backgroundColor")))
            assert b.console == [], b.console
    assert backgrounds["light"] > 160 > 90 > backgrounds["dark"], backgrounds


async def test_readable_at_200_percent_zoom(home: Path) -> None:
    """At twice the scale in a narrow window, no view overflows the page sideways (wide tables
    scroll inside their own box)."""
    async with ui_gateway(home) as ui, browser(viewport={"width": 640, "height": 800},
                                              device_scale_factor=2) as b:
        for view in VIEWS:
            await open_view(b, ui, view)
            wide = await b.do(lambda page: page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"))
            assert wide <= 1, view
        assert b.console == []


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_the_page_reconnects_after_a_gateway_restart(home: Path) -> None:
    port = str(free_port())
    async with browser() as b:
        async with ui_gateway(home, None, "--ui-port", port) as ui:
            await open_view(b, ui, "tools")
            await mark_page(b)
        # The gateway is gone: the page says so and keeps trying.
        await b.do(lambda page: page.wait_for_selector("#live-status:text('reconnecting')"))
        async with ui_gateway(home, None, "--ui-port", port) as again, \
                httpx2.AsyncClient(timeout=10) as http:
            # It learns the new process's token from its own origin and reconnects.
            live = "#live-status:text('live')"
            await b.do(lambda page: page.wait_for_selector(live, timeout=30_000), timeout=40)
            # A change made while it was away shows after the reconnection, without a reload.
            assert (await again.op(http, "tf_tool_set", {"id": "uuid", "action": "hot"}))["ok"] is True
            await appears(b, 'tr[data-tool="uuid"] input[data-axis="hot"]:checked')
            assert await still_marked(b)
        # Only the failed attempts while it was away.
        assert [line for line in b.console if "WebSocket" not in line and "ERR_CONNECTION_REFUSED" not in line
                and "Failed to load resource" not in line] == []


async def test_a_tools_script_is_edited_from_its_detail_panel(home: Path) -> None:
    async with ui_gateway(home) as ui, browser() as b:
        await open_view(b, ui, "tools")
        await b.do(lambda page: page.click('tr[data-tool="echo"] button[data-action="detail"]'))
        await appears(b, "#tool-detail:not([hidden]) #tool-script")
        script = await b.do(lambda page: page.input_value("#tool-script"))
        assert script == (home / "tools" / "scripts" / "echo.py").read_text()

        def edit(page: Any) -> None:
            page.fill('#tool-detail-form [name="summary"]', "Echo, edited from the page")
            page.fill("#tool-script", script + "\n# edited\n")
            page.click('#tool-detail-form [type="submit"]')

        await b.do(edit)
        await b.do(lambda page: page.wait_for_selector("#status-line:text('echo: saved')"))
        assert (home / "tools" / "scripts" / "echo.py").read_text().endswith("# edited\n")
        register = (home / "tools" / "tools.register.json").read_text()
        assert '"summary": "Echo, edited from the page"' in register
        assert b.console == []


async def test_a_hook_turned_off_then_removed_from_the_page(home: Path, tmp_path: Path) -> None:
    """The seeded guard of the Danger Demo, switched on, blocks danger; unticked on the page it
    lets danger run; removed (after the page's own confirmation) it is gone from both files."""
    marker = tmp_path / "danger.log"
    hook = "pre-tool-use/guard-danger-demo"
    row = f'tr[data-hook="{hook}"]'
    async with ui_gateway(home, {"TOOLFUNNEL_DANGER_LOG": str(marker)}) as ui, browser() as b, \
            httpx2.AsyncClient(timeout=10) as http:
        assert ui.gateway is not None
        assert (await ui.op(http, "tf_hook_set", {"id": hook, "action": "enable"}))["ok"] is True
        async with Client(f"{ui.gateway.url}/mcp", mode="legacy", cache=None) as client:
            async def danger_refused() -> bool:
                ran = await client.call_tool("toolfunnel_run_tool", {"name": "danger", "args": {}})
                return bool(ran.is_error)

            with trio.fail_after(10):
                while not await danger_refused():
                    marker.unlink(missing_ok=True)  # not yet applied: it ran; wait for the hook
                    await trio.sleep(0.1)
            assert not marker.exists()
            await open_view(b, ui, "hooks")
            await b.do(lambda page: page.click(f'{row} input[data-action="toggle"]'))
            await appears(b, f'{row} input[data-action="toggle"]:not(:checked)')
            with trio.fail_after(10):
                while await danger_refused():
                    await trio.sleep(0.1)
            assert marker.exists()
            await b.do(lambda page: page.click(f'{row} button[data-action="remove"]'))
            await b.do(lambda page: page.click("dialog button.danger"))  # "Yes"
            await b.do(lambda page: page.wait_for_selector(row, state="detached"))
        hooks = {h["id"] for h in (await ui.view(http, "hooks"))["hooks"]}
        assert hook not in hooks
        assert hook not in (home / "hooks" / "hooks.manifest.json").read_text()
        assert (home / "hooks" / "scripts" / "guard_danger_demo.py").exists()  # its script stays
    assert b.console == []


async def test_an_upstream_disabled_on_the_page_leaves_a_clients_listing_and_comes_back(home: Path) -> None:
    async with ui_gateway(home) as ui, browser() as b:
        assert ui.gateway is not None
        async with Client(f"{ui.gateway.url}/mcp", mode="legacy", cache=None) as client:
            async def listed() -> list[str]:
                answer = await client.call_tool("toolfunnel_list_tools", {"category": "mcp:demo"})
                return [t["id"] for t in (answer.structured_content or {}).get("tools", [])]

            assert "demo_echo" in await listed()
            await open_view(b, ui, "upstreams")
            row = 'tr[data-upstream="demo"]'
            await b.do(lambda page: page.click(f'{row} button[data-action="disable"]'))
            await appears(b, f'{row} button[data-action="enable"]')
            with trio.fail_after(15):
                while "demo_echo" in await listed():
                    await trio.sleep(0.1)
            await b.do(lambda page: page.click(f'{row} button[data-action="enable"]'))
            await appears(b, f'{row} button[data-action="disable"]')
            with trio.fail_after(30):
                while "demo_echo" not in await listed():
                    await trio.sleep(0.2)
    assert b.console == []


MARKUP = '<img src=x onerror="window.__pwned = 1"><b id="injected">bold</b>'


async def test_markup_in_what_the_views_show_stays_text(home: Path) -> None:
    """A display name holding markup (a register tool here; an upstream's descriptions and the
    audit records take the same path) is shown as its characters: no element, no script."""
    add_tools(home, {"id": "markup", "name": MARKUP, "summary": MARKUP, "mode": "reference",
                     "instructions": "Nothing to run."})
    async with ui_gateway(home) as ui, browser() as b:
        for view in ("tools", "surface"):
            panel = f"#panel-{view}"
            await open_view(b, ui, view)
            await appears(b, f"{panel} :text('{MARKUP[:20]}')")
            assert await b.do(lambda page: page.query_selector("#injected")) is None
            assert await b.do(lambda page: page.evaluate("window.__pwned === undefined"))
            shown: str = await b.do(lambda page: page.inner_text(panel))  # noqa: B023 (awaited here)
            assert MARKUP in shown
    assert b.console == []


async def test_an_exposed_tool_is_taken_off_the_top_level_from_the_upstreams_table(home: Path) -> None:
    async with ui_gateway(home) as ui, browser() as b, httpx2.AsyncClient(timeout=10) as http:
        assert ui.gateway is not None
        assert (await ui.op(http, "tf_expose", {"upstream": "demo", "tool": "echo"}))["ok"] is True
        async with Client(f"{ui.gateway.url}/mcp", mode="legacy", cache=None) as client:
            with trio.fail_after(15):
                while "demo_echo" not in await names(client):
                    await trio.sleep(0.1)
            await open_view(b, ui, "upstreams")
            entry = 'tr[data-upstream="demo"] [data-exposed="echo"]'
            await appears(b, entry)
            await b.do(lambda page: page.click(f'{entry} button[data-action="unexpose"]'))
            await b.do(lambda page: page.wait_for_selector(entry, state="detached"))
            with trio.fail_after(15):
                while "demo_echo" in await names(client):
                    await trio.sleep(0.1)
    assert b.console == []
