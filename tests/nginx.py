"""Real nginx (Debian's, installed by scripts/test) in front of several real `tfunnel serve --http`
instances of one home, configured by the shipped `conf/nginx/tfunnel.conf` with only its
addresses changed to the ports of this run."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
import trio

from tests.httpgw import HttpGateway, http_gateway

SHIPPED = Path(__file__).resolve().parent.parent / "conf" / "nginx" / "tfunnel.conf"
# The instance names the shipped file routes (each instance is named after its port there).
NAMES = ("9001", "9002", "9003")


def nginx_binary() -> str:
    found = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
    if found is None:
        pytest.skip("nginx is not installed (scripts/test installs Debian's nginx package)")
    return found


def render(shipped: str, ports: Mapping[str, int], listen: int, names: Sequence[str] = NAMES) -> str:
    """The shipped file with each instance's address moved to its port in this run and the proxy
    to `listen`; every name, map and directive stays as shipped. Instances left out of `ports`
    are dropped from the groups (a run with fewer instances)."""
    text = shipped.replace("listen 127.0.0.1:8080;", f"listen 127.0.0.1:{listen};")
    for name in names:
        if name in ports:
            text = text.replace(f"server 127.0.0.1:{name}", f"server 127.0.0.1:{ports[name]}")
            text = text.replace(f"127\\.0\\.0\\.1:{name}$", f"127\\.0\\.0\\.1:{ports[name]}$")
        else:  # not in this run: out of every group and map
            text = re.sub(rf"\n    server 127\.0\.0\.1:{name}[^\n]*;", "", text)
            text = re.sub(rf"\nupstream tfunnel(_not)?_{name} \{{[^}}]*\}}\n", "\n", text)
            text = re.sub(rf'\n    "~[^"\n]*{name}[^"\n]*"\s+tfunnel(_not)?_{name};', "", text)
    if len(ports) == 1:  # no other instance to send a refused request to
        text = re.sub(r"\nupstream tfunnel_not_\d+ \{[^}]*\}\n", "\n", text)
        text = re.sub(r'\n    "~[^"\n]*"\s+tfunnel_not_\d+;', "", text)
    assert "127.0.0.1:900" not in text and "127\\.0\\.0\\.1:900" not in text, text
    return text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proxy:
    url: str
    proc: trio.Process
    prefix: Path

    def error_log(self) -> str:
        path = self.prefix / "error.log"
        return path.read_text() if path.exists() else ""


@asynccontextmanager
async def nginx(conf: str, prefix: Path, port: int) -> AsyncIterator[Proxy]:
    """nginx in the foreground with `conf` (an http-block include) on loopback `port`."""
    binary = nginx_binary()
    prefix.mkdir(parents=True, exist_ok=True)
    (prefix / "tfunnel.conf").write_text(conf)
    user = "user root;\n" if os.geteuid() == 0 else ""  # workers must reach the test's temp folders
    temp = "".join(f"{kind}_temp_path {prefix / kind};\n    "
                   for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    (prefix / "nginx.conf").write_text(
        f"{user}daemon off;\nworker_processes 1;\npid {prefix / 'nginx.pid'};\n"
        f"error_log {prefix / 'error.log'} warn;\nevents {{ worker_connections 1024; }}\n"
        f"http {{\n    access_log off;\n    {temp}include {prefix / 'tfunnel.conf'};\n}}\n")
    tested = await trio.run_process([binary, "-t", "-p", str(prefix), "-e", str(prefix / "error.log"),
                                     "-c", str(prefix / "nginx.conf")], capture_stderr=True, check=False)
    assert tested.returncode == 0, tested.stderr.decode()
    proc = await trio.lowlevel.open_process(
        [binary, "-p", str(prefix), "-e", str(prefix / "error.log"), "-c", str(prefix / "nginx.conf")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    proxy = Proxy(f"http://127.0.0.1:{port}", proc, prefix)
    try:
        with trio.fail_after(15):
            while True:
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                except OSError:
                    assert proc.poll() is None, proxy.error_log()
                    await trio.sleep(0.05)
                    continue
                await stream.aclose()
                break
        yield proxy
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGQUIT)  # graceful: workers finish, then the master exits
            with trio.move_on_after(5):
                await proc.wait()
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            with trio.CancelScope(shield=True):
                await proc.wait()


@dataclass
class Cluster:
    proxy: Proxy
    instances: dict[str, HttpGateway]

    @property
    def mcp(self) -> str:
        return f"{self.proxy.url}/mcp"

    async def requests(self, method: str = "tools/call") -> dict[str, float]:
        """Each instance's `tfunnel_requests_total` for `method` (all outcomes), from its /metrics."""
        counts: dict[str, float] = {}
        async with httpx2.AsyncClient(timeout=10) as http:
            for name, gw in self.instances.items():
                if gw.proc.returncode is not None:
                    continue
                text = (await http.get(f"{gw.url}/metrics")).text
                line = rf'^tfunnel_requests_total{{[^}}]*method="{re.escape(method)}"[^}}]*}} (\S+)$'
                counts[name] = sum(float(m.group(1)) for m in re.finditer(line, text, re.M))
        return counts

    async def sessions(self) -> dict[str, int]:
        """Each running instance's open legacy sessions, from its /health."""
        counts: dict[str, int] = {}
        async with httpx2.AsyncClient(timeout=10) as http:
            for name, gw in self.instances.items():
                if gw.proc.returncode is None:
                    health = (await http.get(f"{gw.url}/health")).json()
                    assert health["instance"] == name  # /health names the instance
                    counts[name] = health["clients"]["sessions"]
        return counts


@asynccontextmanager
async def cluster(home: Path, prefix: Path, count: int = 3, env: Mapping[str, str] | None = None,
                  *args: str) -> AsyncIterator[Cluster]:
    """`count` instances of `home` (named as the shipped file names them), nginx in front."""
    names = NAMES[:count]
    async with AsyncExitStack() as stack:
        instances: dict[str, HttpGateway] = {}

        async def start(name: str) -> None:
            instances[name] = await stack.enter_async_context(
                http_gateway(home, env, "--instance", name, *args))

        # One at a time: the first start creates the shared key file, the others read it.
        for name in names:
            await start(name)
        ports = {name: int(gw.url.rsplit(":", 1)[1]) for name, gw in instances.items()}
        listen = free_port()
        proxy = await stack.enter_async_context(
            nginx(render(SHIPPED.read_text(), ports, listen, NAMES), prefix, listen))
        yield Cluster(proxy, instances)
