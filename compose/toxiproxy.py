"""The network fault layer: a Toxiproxy server (built once from the Go module proxy, as
compose.gobuild builds Go programs) in front of a target's client listeners, and the faults it
puts on those links.

One server per target that asks for network faults, started by the process that owns the
target's stack: bound to loopback, its API on a free port, one proxy per proxied listener (the
platform's `proxied_endpoints`). It runs in its own process group and dies with its owner
(compose.process.start_process); its log sits in a data dir that names its owner, so a run
killed outright leaves nothing the next run or `stacks prune` does not remove. The API is
spoken with http.client: the few calls used are below. For an existing cluster, the user's own
Toxiproxy (--network-faults=URL) is used instead: its proxies that listen at the target's
address are the links, and nothing is started."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import re
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compose.gobuild import go_program
from compose.process import free_port, make_data_dir, start_process, stop_and_remove
from loadgen.core.errors import StackError
from loadgen.core.interventions import Intervention, bandwidth_text
from loadgen.core.stack import Progress

VERSION = "2.5.0"
MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"
HOST = "127.0.0.1"
START_TIMEOUT_S = 10.0
API_TIMEOUT_S = 5.0
START_TRIES = 3  # the API's free port can be taken before the server binds it
# where a reserved proxy forwards until it is routed: a port nothing listens on (no client is
# given the proxy's address before the broker is up)
UNROUTED = "127.0.0.1:1"


async def toxiproxy_program(progress: Progress) -> Path:
    """The Toxiproxy server, built on first use into streambench's cache."""
    return await go_program("toxiproxy", MODULE, VERSION, "server", progress)


@dataclass(frozen=True)
class Link:
    """One proxied link: clients connect to `listen`, the proxy forwards to `upstream`."""

    name: str  # the endpoint's key in the stack description: "redis"
    listen: str
    upstream: str


def split_endpoint(endpoint: str) -> tuple[str, str]:
    """An endpoint of a stack description as (its scheme with `://`, or "", and HOST:PORT):
    `pulsar://127.0.0.1:6650` → ("pulsar://", "127.0.0.1:6650"); `127.0.0.1:6379` → ("",
    "127.0.0.1:6379"). A proxy forwards HOST:PORT; the clients get the scheme back in front."""
    scheme, sep, rest = endpoint.partition("://")
    return (f"{scheme}{sep}", rest.rstrip("/")) if sep else ("", endpoint)


API_URL = re.compile(r"http://([^/:\s\[\]]+|\[[0-9a-fA-F:]+\]):(\d{1,5})/?")


def api_address(api: str) -> tuple[str, int]:
    """(host, port) of a Toxiproxy API's URL, http://HOST:PORT; ValueError otherwise."""
    m = API_URL.fullmatch(api)
    if m is None or not 0 < int(m.group(2)) < 65536:
        raise ValueError(f"{api[:80]!r} is not a Toxiproxy API's URL (http://HOST:PORT)")
    return m.group(1).strip("[]"), int(m.group(2))


def _same_listener(listen: str, address: str) -> bool:
    """Whether a proxy listening at `listen` is reached at `address` (HOST:PORT): the same port,
    and the same host or a proxy listening on every address."""
    host, _, port = listen.rpartition(":")
    want_host, _, want_port = address.rpartition(":")
    loopback = {"localhost", "127.0.0.1"}
    hosts = {host.strip("[]"), want_host.strip("[]")}
    return port == want_port and (len(hosts) == 1 or hosts <= loopback
                                  or host.strip("[]") in ("", "0.0.0.0", "::"))


class Toxiproxy:
    """A running Toxiproxy server and the proxies of one target."""

    def __init__(self, label: str) -> None:
        self._label = label
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None
        self._host = HOST
        self._port = 0
        self.links: dict[str, Link] = {}

    @classmethod
    async def attach(cls, label: str, api: str, endpoints: dict[str, str]) -> Toxiproxy:
        """The user's own Toxiproxy at `api` (http://HOST:PORT, as api_address takes it), for an
        existing cluster: the proxies among its own that listen at each of `endpoints` (key →
        HOST:PORT the target was given) become the target's links; StackError when one has
        none."""
        proxy = cls(label)
        proxy._host, proxy._port = api_address(api)
        try:
            listed = await proxy._call("GET", "/proxies")
        except OSError as exc:
            raise StackError(f"{label}: no Toxiproxy answers at {api}: {exc}") from None
        for address in endpoints.values():
            found = [p for p in (listed or {}).values()
                     if _same_listener(str(p["listen"]), split_endpoint(address)[1])]
            if not found:
                raise StackError(f"{label}: none of the proxies of the Toxiproxy at {api} listens "
                                 f"at {address}, the target's address")
            proxy.links[str(found[0]["name"])] = Link(str(found[0]["name"]), address,
                                                      str(found[0]["upstream"]))
        return proxy

    async def start(self, progress: Progress) -> None:
        program = await toxiproxy_program(progress)
        self._dir = make_data_dir("streambench-toxiproxy-")
        for _ in range(START_TRIES):
            self._port = free_port(HOST)
            self._proc = start_process([str(program), "-host", HOST, "-port", str(self._port)],
                                       self._dir / "toxiproxy.log")
            if await self._answers():
                return
            await self.stop()
            self._dir = make_data_dir("streambench-toxiproxy-")
        raise StackError(f"{self._label}: Toxiproxy did not start on {HOST} (its log: "
                         f"{self._dir / 'toxiproxy.log'})")

    async def _answers(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False
            with contextlib.suppress(OSError, StackError):
                await self._call("GET", "/version")
                return True
            await asyncio.sleep(0.05)
        return False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def proxy(self, name: str, upstream: str, listen: str = f"{HOST}:0") -> Link:
        """A proxy to `upstream` listening at `listen` (a free loopback port by default);
        returns its link."""
        made = await self._call("POST", "/proxies", {"name": name, "listen": listen,
                                                     "upstream": upstream, "enabled": True})
        link = Link(name, str(made["listen"]), upstream)
        self.links[name] = link
        return link

    async def reserve(self, name: str) -> Link:
        """A proxy on a free loopback port that forwards nowhere yet, for a broker that must be
        told the proxy's address before it starts (it advertises it to clients); route() gives
        it the broker's once the broker is up."""
        return await self.proxy(name, UNROUTED)

    async def route(self, name: str, upstream: str) -> Link:
        """The reserved proxy `name` forwards to `upstream` from now on (on the same port)."""
        made = await self._call("POST", f"/proxies/{name}", {"upstream": upstream})
        link = self.links[name] = Link(name, str(made["listen"]), upstream)
        return link

    async def apply(self, item: Intervention, only: Sequence[str] | None = None,
                    summary: str = "") -> str:
        """One network fault on every link (or on the links named `only`); returns what it
        did, for its event, which names the links (or says `summary` of them)."""
        names = sorted(self.links) if only is None else sorted(only)
        what = summary or self._what(names)
        if item.action == "heal":
            await self._heal(names)
            return f"{what}: toxics removed, proxies up"
        if item.action in ("partition", "reset"):
            for name in names:
                await self._call("POST", f"/proxies/{name}", {"enabled": False})
                if item.action == "reset":
                    await self._call("POST", f"/proxies/{name}", {"enabled": True})
            return (f"{what}: connections closed and new ones refused until heal"
                    if item.action == "partition" else f"{what}: connections closed")
        for name in names:
            for toxic in await self._call("GET", f"/proxies/{name}/toxics"):
                if toxic.get("type") == item.action:  # a new value replaces the old
                    await self._call("DELETE", f"/proxies/{name}/toxics/{toxic['name']}")
            if item.action == "latency":
                assert item.latency_ms is not None
                await self._toxic(name, "latency", "downstream",
                                  {"latency": round(item.latency_ms),
                                   "jitter": round(item.jitter_ms or 0)})
            else:
                assert item.bandwidth is not None
                rate = max(1, round(item.bandwidth / 1000))  # KB/s
                for stream in ("upstream", "downstream"):
                    await self._toxic(name, "bandwidth", stream, {"rate": rate})
        if item.action == "latency":
            jitter = f" ± {item.jitter_ms:g} ms" if item.jitter_ms else ""
            return f"{what}: {item.latency_ms:g} ms{jitter} added to each response"
        assert item.bandwidth is not None
        return f"{what}: {bandwidth_text(item.bandwidth)} each way on each connection"

    async def _heal(self, names: list[str]) -> None:
        """Every toxic of these proxies removed, each enabled (the others of a user's own
        Toxiproxy are left as they are)."""
        for name in names:
            for toxic in await self._call("GET", f"/proxies/{name}/toxics"):
                await self._call("DELETE", f"/proxies/{name}/toxics/{toxic['name']}")
            await self._call("POST", f"/proxies/{name}", {"enabled": True})

    def describe(self) -> dict[str, str]:
        """Each proxied endpoint → `proxy → broker`, for run.json."""
        return {n: f"{link.listen} → {link.upstream}" for n, link in self.links.items()}

    def _what(self, names: list[str]) -> str:
        return ", ".join(f"{self.links[n].listen} → {self.links[n].upstream}" for n in names)

    async def _toxic(self, proxy: str, kind: str, stream: str, attributes: dict[str, int]) -> None:
        await self._call("POST", f"/proxies/{proxy}/toxics",
                         {"name": f"{kind}_{stream}", "type": kind, "stream": stream,
                          "toxicity": 1.0, "attributes": attributes})

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return await asyncio.to_thread(self._request, method, path, body)

    def _request(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        conn = http.client.HTTPConnection(self._host, self._port, timeout=API_TIMEOUT_S)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
            reply = conn.getresponse()
            text = reply.read().decode(errors="replace")
        finally:
            conn.close()
        if reply.status >= 300:
            raise StackError(f"{self._label}: Toxiproxy refused {method} {path}: "
                             f"{reply.status} {text.strip()[:200]}")
        try:
            return json.loads(text) if text.strip() else None
        except ValueError:  # /version answers in plain text
            return text

    async def stop(self, log_dir: Path | None = None) -> None:
        """Stop the server (its log kept in log_dir) and remove its data dir; a user's own
        Toxiproxy keeps running, its proxies healed."""
        if self._proc is None and self._dir is None and self.links:
            with contextlib.suppress(OSError, StackError):
                await self._heal(sorted(self.links))
            return
        proc, self._proc = self._proc, None
        where, self._dir = self._dir, None
        logs = [where / "toxiproxy.log"] if where is not None else []
        await stop_and_remove(proc, where, logs, log_dir)
