"""Test images built offline, so the container tests never pull from a registry.

A Debian bookworm root filesystem from Debian's archive (`debootstrap --variant=minbase`) is
imported as `streambench-test/base:bookworm`; the broker images are `docker build --network
host` on top of it, installing Debian's redis-server and Java 17 and copying the Kafka jars
streambench assembles from Maven Central. Every image is cached by tag: a rebuild happens only
when the tag is missing, and the root filesystem tarball is kept in the jar cache as well.

The images follow the public images' conventions, so the real compose files run unchanged:
- redis: `redis-server` on PATH, data in /data (like `redis:7.2`);
- kafka: `/etc/kafka/docker/run` as the command, configured from `KAFKA_*` variables, KRaft
  when `KAFKA_PROCESS_ROLES` is set (formatted with `CLUSTER_ID`), ZooKeeper mode otherwise,
  heap from `KAFKA_HEAP_OPTS`, data in /var/lib/kafka/data (like `apache/kafka:3.9`);
- zookeeper: `/docker-entrypoint.sh zkServer.sh start-foreground`, configured from `ZOO_*`
  variables, data in /data (like `zookeeper:3.8`);
- pulsar (built by `pulsar()`, for its own test): the release in /pulsar as the working
  directory, `bin/apply-config-from-env.py` setting `conf/*.conf` keys from variables (a key's
  own name, or `PULSAR_PREFIX_<key>`, which also appends a key the file lacks), data in
  /pulsar/data (like `apachepulsar/pulsar:4.0`);
- pravega (built by `pravega()`, for its own test): `/opt/pravega/scripts/entrypoint.sh` as the
  entry point with the role (`standalone`) as its command; the entry point appends the
  standalone's default ports and listener to `JAVA_OPTS`, and `/opt/pravega/bin/pravega-standalone`
  reads its defaults, then `JAVA_OPTS`, then `PRAVEGA_STANDALONE_OPTS` (like `pravega/pravega`);
- prometheus (built by `prometheus()`, for the monitoring stack's test): Debian's Prometheus
  server as the entry point, run as nobody, data in /prometheus (like `prom/prometheus`)."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from compose.kafka import KAFKA_3, coordinates
from compose.maven import assemble, cache_dir
from compose.pravega import PRAVEGA_VERSION, standalone_jars
from compose.pulsar import PULSAR_VERSION, distribution

HERE = Path(__file__).parent / "images"
BASE = "streambench-test/base:bookworm"
REDIS = "streambench-test/redis:7.0"
KAFKA = f"streambench-test/kafka:{KAFKA_3}"
ZOOKEEPER = "streambench-test/zookeeper:3.8"
PRAVEGA = f"streambench-test/pravega:{PRAVEGA_VERSION}"
PULSAR = f"streambench-test/pulsar:{PULSAR_VERSION}"
PROMETHEUS = "streambench-test/prometheus:2.42"  # Debian bookworm's
MIRROR = "http://deb.debian.org/debian"
BUILD_TIMEOUT_S = 900


def _say(message: str) -> None:
    sys.stderr.write(f"test images: {message}\n")
    sys.stderr.flush()


def _exists(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


def _run(argv: list[str], **kwargs: object) -> None:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                         stdin=subprocess.DEVNULL, **kwargs)  # type: ignore[call-overload]
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-15:]
        raise RuntimeError(f"{' '.join(argv[:3])} failed:\n" + "\n".join(tail))


def _base() -> None:
    if _exists(BASE):
        return
    tarball = cache_dir() / "images" / "bookworm-minbase.tar"
    if not tarball.exists():
        if shutil.which("debootstrap") is None:
            raise RuntimeError("debootstrap not found (apt-get install debootstrap)")
        tarball.parent.mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix="streambench-rootfs-"))
        try:
            _say(f"debootstrap bookworm from {MIRROR} (first run only)")
            _run(["debootstrap", "--variant=minbase", "bookworm", str(root), MIRROR])
            (root / "etc/apt/apt.conf.d/90streambench").write_text(
                'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n')
            partial = tarball.with_suffix(".partial")
            _run(["tar", "-C", str(root), "-cf", str(partial), "."])
            partial.rename(tarball)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    _say(f"importing {BASE}")
    _run(["docker", "import", str(tarball), BASE])


def _build(tag: str, name: str, extra: dict[str, Path] | None = None,
           args: dict[str, str] | None = None) -> None:
    if _exists(tag):
        return
    _say(f"building {tag}")
    with tempfile.TemporaryDirectory(prefix="streambench-image-") as tmp:
        context = Path(tmp) / "context"
        shutil.copytree(HERE / name, context)
        for dest, src in (extra or {}).items():
            shutil.copytree(src, context / dest)
        build_args = [f"--build-arg={k}={v}" for k, v in (args or {}).items()]
        _run(["docker", "build", "--network", "host", "-q", *build_args, "-t", tag, str(context)])


def build_all() -> dict[str, str]:
    """Build what is missing; returns the image variables the compose files read."""
    _base()
    _build(REDIS, "redis")
    jars = asyncio.run(assemble(f"kafka-{KAFKA_3}", coordinates(KAFKA_3), _say,
                                what=f"Kafka {KAFKA_3}"))
    _build(KAFKA, "kafka", {"libs": jars[0].parent})
    _build(ZOOKEEPER, "zookeeper", args={"KAFKA_IMAGE": KAFKA})
    return {
        "STREAMBENCH_IMAGE_REDIS": REDIS,
        "STREAMBENCH_IMAGE_KAFKA": KAFKA,
        "STREAMBENCH_IMAGE_KAFKA_ZK": KAFKA,
        "STREAMBENCH_IMAGE_ZOOKEEPER": ZOOKEEPER,
    }


def pravega() -> str:
    """The Pravega standalone image (on first use: its jars from Maven Central, as the local
    runtime assembles them, with the jars the local runtime leaves off the classpath left out)."""
    if not _exists(PRAVEGA):
        _base()
        jars = asyncio.run(standalone_jars(_say, "test images"))
        with tempfile.TemporaryDirectory(prefix="streambench-pravega-lib-") as tmp:
            lib = Path(tmp) / "lib"
            lib.mkdir()
            for jar in jars:  # links, which the build context's copy follows
                (lib / jar.name).symlink_to(jar)
            _build(PRAVEGA, "pravega", {"lib": lib})
    return PRAVEGA


def pulsar() -> str:
    """The Pulsar image (on first use: the distribution from Maven Central, as the local runtime
    fetches it)."""
    if not _exists(PULSAR):
        _base()
        home = asyncio.run(distribution(_say, "test images"))
        _build(PULSAR, "pulsar", {"pulsar": home})
    return PULSAR


def prometheus() -> str:
    """The Prometheus image (Debian's server: the monitoring stack's own image cannot be pulled
    where no registry answers)."""
    if not _exists(PROMETHEUS):
        _base()
        _build(PROMETHEUS, "prometheus")
    return PROMETHEUS


def broken(name: str, script: str) -> str:
    """A redis image whose `redis-server` runs `script` instead (brokers that misbehave)."""
    tag = f"streambench-test/broken-{name}:{hashlib.sha256(script.encode()).hexdigest()[:12]}"
    if not _exists(tag):
        _base()
        with tempfile.TemporaryDirectory(prefix="streambench-image-") as tmp:
            context = Path(tmp)
            (context / "redis-server").write_text(f"#!/bin/sh\n{script}\n")
            (context / "Dockerfile").write_text(
                f"FROM {BASE}\nCOPY redis-server /usr/local/bin/redis-server\n"
                "RUN chmod +x /usr/local/bin/redis-server\n")
            _run(["docker", "build", "--network", "host", "-q", "-t", tag, str(context)])
    return tag


if __name__ == "__main__":
    for key, value in build_all().items():
        print(f"{key}={value}")
