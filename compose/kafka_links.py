"""A local KRaft cluster's links behind Toxiproxy (--network-faults): each broker's client
listener, and between the brokers of a cluster their replication and controller links.

Kafka hands its clients the brokers' advertised addresses, so each broker advertises its client
proxy and is reached only through it. Between brokers a link is proxied per direction: broker
j reaches broker i through a proxy of its own (j → i), for replication (broker j's
inter-broker listener name is PEER<j>, a listener every broker has, advertised at the proxy
j → i) and for the controller quorum (broker j's `controller.quorum.voters` names the proxies
j → i). So a broker can be cut from its clients, from its peers (every link into and out of it
between brokers), or both, and one link is not cut with another. A DIRECT listener, advertised
at its own address, is what the collectors and the stack's own readiness checks use: they keep
reading while a fault is on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from compose.process import free_port
from compose.toxiproxy import VERSION, Toxiproxy
from loadgen.core.errors import StackError
from loadgen.core.interventions import Intervention
from loadgen.core.stack import Progress

HOST = "127.0.0.1"
CLIENTS, PEERS = "clients", "peers"


@dataclass(frozen=True)
class _Proxy:
    name: str  # the proxy's name in Toxiproxy
    listen: int  # its port
    upstream: int  # the broker's port behind it
    brokers: tuple[int, ...]  # the brokers (0-based) whose link it is
    side: str  # CLIENTS | PEERS


def _address(port: int) -> str:
    return f"{HOST}:{port}"


class KafkaLinks:
    """The listener ports and proxies of a local KRaft cluster of `count` brokers whose client
    listeners are `client_ports`."""

    def __init__(self, label: str, client_ports: Sequence[int], taken: Sequence[int]) -> None:
        self._label = label
        self.count = n = len(client_ports)
        chosen = set(client_ports) | set(taken)

        def port() -> int:
            while (p := free_port(HOST)) in chosen:
                pass
            chosen.add(p)
            return p

        self.client_ports = list(client_ports)
        self.direct_ports = [port() for _ in range(n)]
        self.controller_ports = [port() for _ in range(n)]
        # peer_ports[i][j]: broker i's listener PEER<j+1>, the one broker j reaches it at
        self.peer_ports = [[port() for _ in range(n)] for _ in range(n)] if n > 1 else []
        self.proxies: list[_Proxy] = [
            _Proxy(f"broker-{i + 1}-clients", port(), client_ports[i], (i,), CLIENTS)
            for i in range(n)]
        self._replication: dict[tuple[int, int], int] = {}  # (from j, to i) → proxy port
        self._controller: dict[tuple[int, int], int] = {}
        for i in range(n):
            for j in range(n):
                if i == j:
                    continue
                rep = _Proxy(f"broker-{j + 1}-to-{i + 1}-replication", port(),
                             self.peer_ports[i][j], (j, i), PEERS)
                ctl = _Proxy(f"broker-{j + 1}-to-{i + 1}-controller", port(),
                             self.controller_ports[i], (j, i), PEERS)
                self._replication[(j, i)], self._controller[(j, i)] = rep.listen, ctl.listen
                self.proxies += [rep, ctl]
        self._toxiproxy = Toxiproxy(label)

    def ports(self) -> list[int]:
        """Every port the brokers bind besides their client listeners."""
        return [*self.direct_ports, *self.controller_ports, *(p for row in self.peer_ports for p in row)]

    def listener_config(self, i: int) -> dict[str, object]:
        """Broker i's (0-based) listeners, what it advertises and how it reaches its peers."""
        listeners = {"CLIENT": self.client_ports[i], "DIRECT": self.direct_ports[i],
                     "CONTROLLER": self.controller_ports[i]}
        advertised = {"CLIENT": self._proxy_port(CLIENTS, (i,)), "DIRECT": self.direct_ports[i]}
        for j in range(self.count if self.count > 1 else 0):
            listeners[f"PEER{j + 1}"] = self.peer_ports[i][j]
            advertised[f"PEER{j + 1}"] = (self.peer_ports[i][j] if i == j
                                          else self._replication[(j, i)])
        voters = ",".join(
            f"{j + 1}@{_address(self.controller_ports[j] if i == j else self._controller[(i, j)])}"
            for j in range(self.count))
        return {
            "process.roles": "broker,controller",
            "node.id": i + 1,
            "controller.quorum.voters": voters,
            "listeners": ",".join(f"{k}://{_address(p)}" for k, p in listeners.items()),
            "advertised.listeners": ",".join(f"{k}://{_address(p)}" for k, p in advertised.items()),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": f"PEER{i + 1}" if self.count > 1 else "DIRECT",
            "listener.security.protocol.map": ",".join(f"{k}:PLAINTEXT" for k in listeners),
        }

    def _proxy_port(self, side: str, brokers: tuple[int, ...]) -> int:
        return next(p.listen for p in self.proxies if p.side == side and p.brokers == brokers)

    def client_bootstrap(self) -> str:
        return ",".join(_address(self._proxy_port(CLIENTS, (i,))) for i in range(self.count))

    def direct_bootstrap(self) -> str:
        return ",".join(_address(p) for p in self.direct_ports)

    @property
    def pid(self) -> int | None:
        return self._toxiproxy.pid

    async def start(self, progress: Progress) -> None:
        """The Toxiproxy server and every proxy, before the brokers start (they advertise the
        proxies)."""
        await self._toxiproxy.start(progress)
        for p in self.proxies:
            await self._toxiproxy.proxy(p.name, _address(p.upstream), listen=_address(p.listen))
        between = f", {len(self.proxies) - self.count} between brokers" if self.count > 1 else ""
        progress(f"{self._label}: Toxiproxy {VERSION}: {self.count} client proxies{between}")

    def links(self, broker: int | None, side: str | None) -> list[str]:
        """The proxies of one broker (0-based; None: every broker) on one side (None: both)."""
        if side == PEERS and self.count == 1:
            raise StackError(f"{self._label}: a single broker has no peers to be cut from")
        return [p.name for p in self.proxies if (broker is None or broker in p.brokers)
                and (side is None or p.side == side)]

    async def apply(self, item: Intervention, broker: int | None, side: str | None) -> str:
        """One network fault on the links of one broker (every broker when None) on one side."""
        names = self.links(broker, side)
        who = "every broker" if broker is None else f"broker-{broker + 1}"
        which = {CLIENTS: "from its clients", PEERS: "from its peers"}.get(side or "", "")
        return await self._toxiproxy.apply(item, names, f"{who} {which}".strip())

    def describe(self) -> dict[str, str]:
        """Each proxy → `proxy → broker`, for run.json."""
        return self._toxiproxy.describe()

    async def stop(self, log_dir: Path | None = None) -> None:
        await self._toxiproxy.stop(log_dir)
