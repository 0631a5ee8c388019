"""The report job runs unchanged on a real Spark standalone cluster and gives the same figures
as in local mode.

A master and a worker are started from the pyspark installation on loopback (free ports, web
UIs on ephemeral ports, the master's REST server off), each in its own process group, and
stopped with everything they started (executors included) when the module ends, whatever the
outcome. The cluster report runs in a subprocess (`python -m analysis.report … --master
spark://…`), so it gets its own Spark driver next to the test session's local one."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pyspark
import pytest

from tests.analysis.conftest import Built
from tests.analysis.synthetic_runs import SyntheticRun

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scala_version(spark_home: Path) -> str:
    """The Scala version the jars were built for (the worker's launcher needs it to find
    them, as Spark's own scripts tell it)."""
    for jar in (spark_home / "jars").glob("spark-core_*.jar"):
        if m := re.match(r"spark-core_(\d+\.\d+)-", jar.name):
            return m.group(1)
    pytest.skip(f"no spark-core jar in {spark_home / 'jars'}")


def _start(argv: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def _wait_for(proc: subprocess.Popen[bytes], log: Path, text: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    pytest.fail(f"{log.stem} did not log {text!r} (exit code {proc.poll()}):\n{tail}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a daemon and its process group (a worker's executors are in it)."""
    for sig, wait_s in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):  # executors may outlive their worker
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on PATH")
    spark_home = Path(pyspark.__file__).resolve().parent
    work = tmp_path_factory.mktemp("standalone")
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home),
        "SPARK_SCALA_VERSION": _scala_version(spark_home),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    classpath = str(spark_home / "jars" / "*")
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        master = _start(
            [java, "-Xmx256m", "-Dspark.master.rest.enabled=false", "-cp", classpath,
             "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", "0"],
            work / "master.log", env)
        daemons.append(master)
        _wait_for(master, work / "master.log", "I have been elected leader")
        worker = _start(
            [java, "-Xmx256m", "-cp", classpath, "org.apache.spark.deploy.worker.Worker", url,
             "--host", "127.0.0.1", "--port", "0", "--webui-port", "0", "--cores", "1",
             "--memory", "1g", "--work-dir", str(work / "work")],
            work / "worker.log", env)
        daemons.append(worker)
        _wait_for(worker, work / "worker.log", "Successfully registered with master")
        yield url, work
    finally:
        for proc in reversed(daemons):
            _stop(proc)


def test_cluster_report_equals_local(standalone_cluster: tuple[str, Path], built: Built,
                                     synthetic: SyntheticRun, run_b: SyntheticRun,
                                     tmp_path: Path) -> None:
    url, work = standalone_cluster
    out = tmp_path / "cluster-report"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "analysis.report", str(synthetic.run_dir), str(run_b.run_dir),
         "--out", str(out), "--baseline", "beta", "--master", url],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == str(out / "report.md")
    assert "report: latency percentiles: Spark stages" in proc.stderr
    # the work ran on the cluster's executor, not in the driver
    apps = list((work / "work").glob("app-*/*/stderr"))
    assert apps, "no executor was started by the worker"

    local = pq.read_table(built.out / "summary.parquet")
    cluster = pq.read_table(out / "summary.parquet")
    assert cluster.schema == local.schema
    for name in local.column_names:
        for a, b in zip(local[name].to_pylist(), cluster[name].to_pylist(), strict=True):
            if isinstance(a, float):
                assert b == pytest.approx(a, rel=1e-12, abs=1e-12), name
            else:
                assert a == b, name
    assert sorted(p.name for p in (out / "charts").iterdir()) == sorted(
        p.name for p in (built.out / "charts").iterdir())
