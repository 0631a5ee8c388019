"""RabbitMQ Streams stacks: a local RabbitMQ node (Debian's rabbitmq-server or a generic
install) started as streambench's own child, or an existing server (external runtime).

The local node is private to the run: its own node name, Erlang cookie, data, log and config
under one directory, listeners (AMQP, stream, management, Erlang distribution) on free
loopback ports, and an epmd of its own on a free loopback port, run in the foreground as a
child too, so the machine's shared epmd (4369) is neither used nor started and nothing is left
running after the stack goes down. The node's CLI tools (rabbitmqctl, rabbitmq-streams) reach
it through `cli()` with the same environment."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import re
import secrets
import shutil
import subprocess
from pathlib import Path

from rstream.client import ClientPool

from compose.docker import ComposeStack
from compose.net import connect_failure
from compose.process import (
    LocalNode,
    OneNodeLocalStack,
    free_port,
    make_data_dir,
    port_in_use,
    stop_process,
    tail,
)
from loadgen.core.errors import StackError, TargetError
from loadgen.core.security import read_secret
from loadgen.core.settings import settings_of, text
from loadgen.core.stack import Progress, Stack, StackDescription, announce_runtime
from loadgen.core.target import Target, join_host_port, split_host_port

DATA_PREFIX = "streambench-rabbitmq-"
MIN_VERSION = (3, 9)  # streams and the stream protocol arrived in RabbitMQ 3.9
STREAM_PORT = 5552  # the default stream port of an existing server
MANAGEMENT_PORT = 15672
# the Debian package's scripts: the ones in /usr/sbin switch to the rabbitmq user first
_DEBIAN_SCRIPTS = Path("/usr/lib/rabbitmq/bin")
PLUGINS = ("rabbitmq_stream", "rabbitmq_stream_management")
START_TIMEOUT_S = 90.0  # a node takes ~10 s on an idle machine, much longer on a busy one
CLI_TIMEOUT_S = 60.0


def parse_address(address: str, default_port: int = STREAM_PORT) -> tuple[str, int]:
    try:
        return split_host_port(address, default_port)
    except ValueError as exc:
        raise TargetError(f"bad address {address!r}: {exc}; expected HOST:PORT, "
                         f"e.g. 127.0.0.1:{STREAM_PORT}") from None


def script(name: str) -> str | None:
    """A RabbitMQ script (rabbitmq-server, rabbitmqctl, rabbitmq-streams) that runs as the
    calling user."""
    debian = _DEBIAN_SCRIPTS / name
    if os.access(debian, os.X_OK):
        return str(debian)
    return shutil.which(name)


def epmd_binary() -> str | None:
    found = shutil.which("epmd")
    if found:
        return found
    matches = sorted(glob.glob("/usr/lib/erlang/erts-*/bin/epmd"))
    return matches[-1] if matches else None


def check_version(version: str, where: str) -> None:
    parts = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
    if parts and parts < MIN_VERSION:
        raise StackError(f"{where} runs RabbitMQ {version}; streambench needs RabbitMQ 3.9 or "
                         "newer (streams)")


async def hello(host: str, port: int, user: str, password: str, timeout_s: float) -> str:
    """Open a stream-protocol connection (peer properties, SASL, tune, open) and return the
    server's version; raises OSError, TimeoutError or the client's errors when it fails."""
    pool = ClientPool(host, port, vhost="/", username=user, password=password,
                      frame_max=1024 * 1024, heartbeat=60, load_balancer_mode=False, max_retries=1)
    try:
        client = await asyncio.wait_for(pool.get("streambench-probe"), timeout_s)
        return str((client.server_properties or {}).get("version", ""))
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(pool.close(), 2.0)


ENABLED_PLUGINS = f"[{','.join(PLUGINS)}].\n"


def node_settings(ports: dict[str, int], advertised: str | None = None) -> dict[str, str]:
    """What streambench writes into the rabbitmq.conf of a node it starts: every listener on
    loopback, on its port; the stream listener advertised as itself, or as `advertised`
    (HOST:PORT of a proxy in front of it, for network faults)."""
    host, port = split_host_port(advertised, 0) if advertised else ("127.0.0.1", ports["stream"])
    return {
        "listeners.tcp.1": f"127.0.0.1:{ports['amqp']}",
        "stream.listeners.tcp.1": f"127.0.0.1:{ports['stream']}",
        # what the stream protocol's metadata tells clients to connect to
        "stream.advertised_host": host,
        "stream.advertised_port": str(port),
        "management.tcp.ip": "127.0.0.1",
        "management.tcp.port": str(ports["management"]),
        # per-second figures for the telemetry (default: every 5 s)
        "collect_statistics_interval": "1000",
        "log.console": "true",
        "log.file": "false",
    }


def node_config(ports: dict[str, int], broker: dict[str, str] | None = None,
                advertised: str | None = None) -> str:
    """rabbitmq.conf of a node streambench starts: its own settings, then the target's
    `broker.` settings (a key given there replaces streambench's line)."""
    settings = {**node_settings(ports, advertised), **(broker or {})}
    return "".join(f"{key} = {value}\n" for key, value in settings.items())


def broker_settings(target: Target) -> dict[str, str]:
    """The target's `broker.` settings, rabbitmq.conf key -> value as written."""
    return {key: text(value) for key, value in settings_of(target, "broker").items()}


def cli_environment(data_dir: Path, epmd_port: int) -> dict[str, str]:
    """The environment the node's CLI tools (and the node) need to reach a node streambench
    started: its Erlang cookie (HOME), its own epmd on loopback, no machine-wide RabbitMQ files."""
    erl_args = "-start_epmd false -kernel inet_dist_use_interface {127,0,0,1}"
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("RABBITMQ_", "ERL_")) and k != "HOME"}
    return {
        **keep,
        "HOME": str(data_dir / "home"),  # the Erlang cookie
        "ERL_EPMD_ADDRESS": "127.0.0.1",
        "ERL_EPMD_PORT": str(epmd_port),
        "RABBITMQ_USE_LONGNAME": "false",
        "RABBITMQ_CONF_ENV_FILE": str(data_dir / "rabbitmq-env.conf"),
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": erl_args,
        "RABBITMQ_CTL_ERL_ARGS": erl_args,
    }


def run_tool(tool: str, node: str, env: dict[str, str], args: tuple[str, ...], label: str,
             timeout_s: float = CLI_TIMEOUT_S) -> str:
    """Run rabbitmqctl / rabbitmq-streams / rabbitmq-diagnostics against `node` (blocking) and
    return its output; StackError when it fails."""
    binary = script(tool)
    if binary is None or not env:
        raise StackError(f"{label}: {tool} not found or the node is not up")
    try:
        done = subprocess.run([binary, "-n", node, "-q", *args], env=env, capture_output=True,
                              text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise StackError(f"{label}: {tool} {' '.join(args)[:100]} gave no answer in "
                         f"{timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise StackError(f"{label}: {tool} {' '.join(args)[:100]} failed: "
                         f"{(done.stderr or done.stdout).strip()[:300]}")
    return done.stdout


def _in_container(container: str, argv: tuple[str, ...], label: str,
                  timeout_s: float = CLI_TIMEOUT_S) -> str:
    """A node's CLI tool run in its container (which holds the node's name, cookie and epmd
    port in its environment); StackError when it fails."""
    try:
        done = subprocess.run(["docker", "exec", container, *argv], capture_output=True, text=True,
                              timeout=timeout_s, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StackError(f"{label}: {argv[0]} in container {container[:12]}: {exc}") from None
    if done.returncode != 0:
        raise StackError(f"{label}: {argv[0]} in container {container[:12]} failed: "
                         f"{(done.stderr or done.stdout).strip()[:300]}")
    return done.stdout


def _erlang_string(text_: str) -> str:
    return '"' + text_.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _erlang_atom(text_: str) -> str:
    return "'" + text_.replace("\\", "\\\\").replace("'", "\\'") + "'"


# prints `KEY<tab>VALUE` for each {KEY, App, Path} whose application parameter the node holds
# and whose value is one plain value (a number, an atom, a string)
_READ_ENV = """
Get = fun G(V, []) -> {ok, V};
          G(L, [K | R]) when is_list(L) ->
              case lists:keyfind(K, 1, L) of {K, V} -> G(V, R); _ -> none end;
          G(M, [K | R]) when is_map(M) ->
              case maps:find(K, M) of {ok, V} -> G(V, R); error -> none end;
          G(_, _) -> none end,
Show = fun(V) when is_integer(V); is_float(V); is_atom(V) -> {ok, io_lib:format("~p", [V])};
          (V) when is_binary(V) -> {ok, V};
          (V) when is_list(V) ->
              case io_lib:printable_unicode_list(V) of true -> {ok, V}; false -> none end;
          (_) -> none end,
lists:foreach(fun({Key, App, [P | R]}) ->
    try
        case application:get_env(App, P) of
            {ok, V0} ->
                case Get(V0, R) of
                    {ok, V} -> case Show(V) of
                                   {ok, S} -> io:format("~s\t~ts~n", [Key, S]);
                                   none -> ok
                               end;
                    none -> ok
                end;
            undefined -> ok
        end
    catch _:_ -> ok
    end end, WANTED).
"""


def read_node_settings(config: dict[str, str], wanted: dict[str, str], label: str,
                       container: str = "") -> dict[str, str]:
    """The values a node streambench started holds for rabbitmq.conf keys, read from the
    application parameters each key sets (`wanted`: key -> "app.param[.sub…]", as the schema
    maps it) with `rabbitmqctl eval` (run in the node's `container` on the docker runtime):
    key -> value, for the keys whose parameter is set and is one plain value. The values are
    the node's, after its schema translated them (a value may read back in another form than
    written). StackError when the node does not answer."""
    terms = []
    for key, target in wanted.items():
        app, *path = target.split(".")
        if not path or not re.fullmatch(r"[a-z_][a-z0-9_]*", app):
            continue
        atoms = ", ".join(_erlang_atom(p) for p in path)
        terms.append(f"{{{_erlang_string(key)}, {_erlang_atom(app)}, [{atoms}]}}")
    if not terms:
        return {}
    expression = _READ_ENV.replace("WANTED", "[" + ", ".join(terms) + "]")
    if container:
        out = _in_container(container, ("rabbitmqctl", "-q", "eval", expression), label)
    else:
        env = cli_environment(Path(config["data_dir"]), int(config["epmd_port"]))
        out = run_tool("rabbitmqctl", config["node"], env, ("eval", expression), label)
    found: dict[str, str] = {}
    for line in out.splitlines():
        key, tab, value = line.partition("\t")
        if tab and key in wanted:
            found[key] = value
    return found


class RabbitLocalStack(OneNodeLocalStack):
    NODE = "rabbitmq"  # the fault hooks' name of the one broker
    SERVER = "rabbitmq-server"
    LOGS = ("rabbitmq.log", "epmd.log")

    def __init__(self, target: Target, label: str) -> None:
        self._target = target
        self._label = label
        self._requested_port = int(target.options.get("port") or 0)
        self._ports: dict[str, int] = {}
        self._node: LocalNode | None = None
        self._epmd: LocalNode | None = None
        self._dir: Path | None = None
        self._node_name = ""
        self._env: dict[str, str] = {}
        self._version = ""
        self._broker = broker_settings(target)

    # -- the node's files ------------------------------------------------------------------

    def _write_files(self, root: Path) -> None:
        (root / "rabbitmq.conf").write_text(node_config(self._ports, self._broker,
                                                        self.context.advertised.get("stream")))
        (root / "enabled_plugins").write_text(ENABLED_PLUGINS)
        (root / "rabbitmq-env.conf").write_text("")  # the machine's /etc one is not read
        home = root / "home"
        home.mkdir()
        cookie = home / ".erlang.cookie"
        cookie.write_text(secrets.token_hex(16).upper())
        cookie.chmod(0o400)

    def _environment(self, root: Path) -> dict[str, str]:
        p = self._ports
        return {
            **cli_environment(root, p["epmd"]),
            "RABBITMQ_NODENAME": self._node_name,
            "RABBITMQ_MNESIA_BASE": str(root / "mnesia"),
            "RABBITMQ_LOG_BASE": str(root / "log"),
            "RABBITMQ_LOGS": "-",
            "RABBITMQ_PID_FILE": str(root / "rabbitmq.pid"),
            "RABBITMQ_CONFIG_FILE": str(root / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(root / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(root / "enabled_plugins"),
            "RABBITMQ_DIST_PORT": str(p["dist"]),
            # the script then execs the VM instead of running it as its own child: beam.smp is
            # the process streambench started, so it dies with streambench (the death signal of
            # compose.process) and receives the signals of the fault hooks itself
            "RUNNING_UNDER_SYSTEMD": "true",
        }

    def _choose_ports(self) -> None:
        taken: set[int] = set()

        def pick() -> int:
            while True:
                port = free_port()
                if port not in taken:
                    taken.add(port)
                    return port

        stream = self._requested_port or pick()
        taken.add(stream)
        self._ports = {"stream": stream, "amqp": pick(), "management": pick(), "dist": pick(),
                       "epmd": pick()}

    # -- up / ready / down ------------------------------------------------------------------

    async def up(self, progress: Progress) -> None:
        announce_runtime(progress, self._label, self._target.options)
        server, epmd = script("rabbitmq-server"), epmd_binary()
        if server is None or epmd is None:
            raise StackError("rabbitmq-server not found: install it (Debian/Ubuntu: apt-get install "
                             "rabbitmq-server) or point the target at a server with "
                             "rabbitmq@HOST:PORT")
        if self._requested_port and port_in_use(self._requested_port):
            raise StackError(f"port {self._requested_port} on 127.0.0.1 is already in use; choose "
                             f"another with {self._target.platform}:port=N or leave port unset")
        root = self._dir = make_data_dir(DATA_PREFIX)
        self._node_name = f"streambench-{os.getpid()}-{root.name.rsplit('-', 1)[-1]}@localhost"
        for _attempt in range(3):
            self._choose_ports()
            self._stop_children()
            for leftover in ("mnesia", "home", "log"):
                shutil.rmtree(root / leftover, ignore_errors=True)
            self._write_files(root)
            self._env = self._environment(root)
            self._epmd = LocalNode("epmd", [epmd, "-port", str(self._ports["epmd"]),
                                            "-address", "127.0.0.1"], root / "epmd.log", env=self._env)
            self._epmd.start()
            progress(f"{self._label}: starting rabbitmq-server (node {self._node_name}; it takes "
                     "10 s or more)")
            node = self._node = LocalNode(self.NODE, [server], root / "rabbitmq.log", cwd=root,
                                          env=self._env)
            node.start()
            if await self._wait_listening(node, START_TIMEOUT_S):
                return
            log = tail(node.log, 8)
            self._stop_children()
            if self._requested_port or "eaddrinuse" not in log.lower():
                raise StackError(f"{self._label}: rabbitmq-server did not start: {log or 'no output'}")
        raise StackError(f"{self._label}: no free loopback ports for rabbitmq-server after 3 tries")

    async def _wait_listening(self, node: LocalNode, timeout_s: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            if not node.running or self._epmd is None or not self._epmd.running:
                return False
            if port_in_use(self._ports["stream"]):
                try:
                    self._version = await hello("127.0.0.1", self._ports["stream"], "guest", "guest", 5.0)
                    if await asyncio.to_thread(self._management_answers):
                        return True
                except Exception:  # the node is still booting
                    pass
            await asyncio.sleep(0.25)
        return False

    def _management_answers(self) -> bool:
        return port_in_use(self._ports["management"])

    async def ready(self, timeout_s: float, progress: Progress) -> None:
        try:
            self._version = await hello("127.0.0.1", self._ports["stream"], "guest", "guest", timeout_s)
        except Exception as exc:
            raise StackError(f"{self._label}: rabbitmq-server on port {self._ports['stream']} does "
                             f"not answer the stream protocol: {connect_failure(exc)}") from None
        check_version(self._version, "the local rabbitmq-server")

    async def _node_ready(self, node: LocalNode, timeout_s: float) -> None:
        if not await self._wait_listening(node, timeout_s):
            raise StackError(f"{self._label}: rabbitmq-server did not answer on port "
                             f"{self._ports['stream']} after a start: {tail(node.log) or 'no output'}")

    def _stop_children(self) -> None:
        node, epmd, self._node, self._epmd = self._node, self._epmd, None, None
        if node is not None and node.proc is not None:
            stop_process(node.proc)
        if epmd is not None and epmd.proc is not None:  # after the node: it deregisters first
            stop_process(epmd.proc, grace_s=2.0)

    async def down(self) -> None:
        epmd, self._epmd = self._epmd, None
        await super().down()  # the node, then its files (logs kept)
        if epmd is not None and epmd.proc is not None:
            await asyncio.to_thread(stop_process, epmd.proc, 2.0)

    # -- the node's CLI tools -----------------------------------------------------------------

    def cli(self, tool: str, *args: str, timeout_s: float = CLI_TIMEOUT_S) -> str:
        """Run rabbitmqctl / rabbitmq-streams / rabbitmq-diagnostics against this node (blocking)
        and return its output; StackError when it fails."""
        return run_tool(tool, self._node_name, self._env, args, self._label, timeout_s)

    def describe(self) -> StackDescription:
        p = self._ports
        pid = self._node.pid if self._node is not None and self._node.running else None
        return StackDescription(
            runtime="local",
            endpoints={"stream": f"127.0.0.1:{p.get('stream', 0)}",
                       "amqp": f"127.0.0.1:{p.get('amqp', 0)}",
                       "management": f"http://127.0.0.1:{p.get('management', 0)}"},
            pids=(pid,) if pid is not None else (),
            version=self._version,
            config={"node": self._node_name, "data_dir": str(self._dir),
                    "epmd_port": str(p.get("epmd", 0)), "plugins": ",".join(PLUGINS)},
            broker_settings=({**node_settings(p, self.context.advertised.get("stream")),
                              **self._broker} if p else dict(self._broker)),
        )


class RabbitDockerStack(ComposeStack):
    """One node in a container (compose/rabbitmq.yml) on the host network, configured like the
    local runtime's node: loopback listeners on ports chosen here, its epmd and distribution
    port too (a machine's own epmd on 4369 is left alone)."""

    product = "rabbitmq"

    def __init__(self, target: Target, label: str) -> None:
        super().__init__(target, label)
        self._ports: dict[str, int] = {}
        self._dir: Path | None = None

    def files(self) -> list[str]:
        return ["rabbitmq.yml"]

    def settings(self) -> dict[str, str]:
        stream = self.take_port(int(self._target.options.get("port") or 0))
        self._ports = {"stream": stream, "amqp": self.take_port(0), "management": self.take_port(0),
                       "dist": self.take_port(0), "epmd": self.take_port(0)}
        root = self._dir = make_data_dir(DATA_PREFIX)
        root.chmod(0o755)  # the container's rabbitmq user reads the files
        (root / "rabbitmq.conf").write_text(node_config(self._ports, broker_settings(self._target)))
        (root / "enabled_plugins").write_text(ENABLED_PLUGINS)
        for name in ("rabbitmq.conf", "enabled_plugins"):
            (root / name).chmod(0o644)
        return {"STREAMBENCH_RABBITMQ_CONF": str(root / "rabbitmq.conf"),
                "STREAMBENCH_RABBITMQ_PLUGINS": str(root / "enabled_plugins"),
                "STREAMBENCH_RABBITMQ_NODE": f"streambench-{os.getpid()}@localhost",
                "STREAMBENCH_RABBITMQ_DIST_PORT": str(self._ports["dist"]),
                "STREAMBENCH_RABBITMQ_EPMD_PORT": str(self._ports["epmd"])}

    def brokers(self) -> list[str]:
        return ["rabbitmq"]

    async def probe(self) -> bool:
        try:
            self._version = await hello("127.0.0.1", self._ports["stream"], "guest", "guest", 5.0)
        except Exception:
            return False
        return port_in_use(self._ports["management"])

    async def ready(self, timeout_s: float, progress: Progress) -> None:
        await super().ready(timeout_s, progress)
        check_version(self._version, f"the image {self._images.get('rabbitmq')}")

    def endpoints(self) -> dict[str, str]:
        p = self._ports
        return {"stream": f"127.0.0.1:{p['stream']}", "amqp": f"127.0.0.1:{p['amqp']}",
                "management": f"http://127.0.0.1:{p['management']}"}

    def config(self) -> dict[str, str]:
        return {"plugins": ",".join(PLUGINS), "epmd_port": str(self._ports.get("epmd", 0))}

    def written(self, services: dict[str, object]) -> dict[str, str]:
        return {**node_settings(self._ports), **broker_settings(self._target)}

    async def down(self) -> None:
        try:
            await super().down()
        finally:
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None


class RabbitExternalStack(Stack):
    runtime = "external"

    def __init__(self, target: Target, label: str) -> None:
        assert target.address is not None
        self._label = label
        self._host, self._port = parse_address(target.address)
        self._where = join_host_port(self._host, self._port)
        opts = target.options
        secret = read_secret(target, "password")
        self._user = str(opts.get("user") or "guest")
        self._password = secret.reveal() if secret else "guest"
        self._management_port = int(opts.get("management_port") or 0)
        self._version = ""

    async def up(self, progress: Progress) -> None:
        progress(f"{self._label}: using the existing server at {self._where}")

    async def ready(self, timeout_s: float, progress: Progress) -> None:
        try:
            self._version = await hello(self._host, self._port, self._user, self._password,
                                        min(timeout_s, 10.0))
        except Exception as exc:
            raise StackError(f"{self._label}: cannot reach rabbitmq at {self._where}: "
                             f"{connect_failure(exc)}") from None
        check_version(self._version, self._where)

    async def down(self) -> None:
        return None

    def describe(self) -> StackDescription:
        endpoints = {"stream": self._where}
        if self._management_port:
            host = f"[{self._host}]" if ":" in self._host else self._host
            endpoints["management"] = f"http://{host}:{self._management_port}"
        return StackDescription(runtime="external", endpoints=endpoints, version=self._version)
