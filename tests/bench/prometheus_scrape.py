"""Cross-check: a real Prometheus server scrapes a real run, and what it stored equals the run.

Builds the Prometheus server (cmd/prometheus of the Go module github.com/prometheus/prometheus)
from the Go module proxy once into streambench's cache, as compose.gobuild builds every Go
program (several minutes of both cores the first time: it links the whole server, which is why
`make test` checks the exposition with compose/promcheck instead and this runs in `make bench`).
It starts the server on loopback with a scrape every second, makes a 2 s + 4 s run at 1,000
msg/s on a local redis-server with `--metrics` and one rate change (an event for the
dashboard's event panel and annotation), then prints side by side what the server stored
(max_over_time of the produced, consumed and e2e-count series) and what the run's files say
(run.json's totals, the latency table's e2e count), and whether every query of the Grafana
dashboard (compose/grafana/streambench.json) returns data from the server (an annotation query,
which marks events, only where the run had one). Exit status 1 when a figure differs or a
panel's query returns nothing."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pyarrow.dataset as ds
import yaml

from compose.gobuild import go_program
from compose.process import free_port, start_process, stop_process

ROOT = Path(__file__).resolve().parents[2]
MODULE = "github.com/prometheus/prometheus"
VERSION = "0.316.0"  # the newest the Go module proxy serves
DASHBOARD = ROOT / "compose" / "grafana" / "streambench.json"
GRAFANA_VARIABLES = {"$__rate_interval": "10s", "$target": ".*"}
SERIES = ("produced_messages_total", "consumed_messages_total",
          "end_to_end_latency_seconds_count")


def query(api: str, expr: str) -> list[dict]:
    url = f"{api}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        body = json.loads(answer.read())
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus refused {expr!r}: {body}")
    return body["data"]["result"]


def wait_ready(api: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{api}/-/ready", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.2)
    raise RuntimeError(f"Prometheus not ready within 60 s: {log.read_text()[-2000:]}")


def dashboard_exprs() -> tuple[list[str], list[str]]:
    """The panels' queries and the annotations' (Grafana's variables filled in)."""
    board = json.loads(DASHBOARD.read_text())
    found = []
    for exprs in ([t["expr"] for p in board["panels"] for t in p["targets"]],
                  [a["expr"] for a in board["annotations"]["list"]]):
        for grafana, value in GRAFANA_VARIABLES.items():
            exprs = [e.replace(grafana, value) for e in exprs]
        found.append(exprs)
    return found[0], found[1]


def main() -> int:
    started = time.monotonic()
    server_bin = asyncio.run(go_program("prometheus", f"{MODULE}/cmd/prometheus", VERSION,
                                        "prometheus", print))
    print(f"Prometheus {VERSION} at hand after {time.monotonic() - started:.0f} s")
    work = Path(tempfile.mkdtemp(prefix="streambench-prometheus-check-"))
    exporter, web = free_port(), free_port()
    config = work / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "streambench",
                            "static_configs": [{"targets": [f"127.0.0.1:{exporter}"]}]}]}))
    log = work / "prometheus.log"
    server = start_process([str(server_bin), f"--config.file={config}",
                            f"--storage.tsdb.path={work / 'tsdb'}",
                            f"--web.listen-address=127.0.0.1:{web}"], log)
    api = f"http://127.0.0.1:{web}"
    failed = 0
    try:
        wait_ready(api, log)
        run_dir = work / "run"
        res = subprocess.run([sys.executable, "-m", "tui.cli", "run", "redis", "--runtime",
                              "local", "--headless", "--warmup", "2", "--duration", "4",
                              "--rate", "1000", "--at", "3s:rate=1200",  # an event
                              "--metrics", str(exporter), "--out",
                              str(run_dir)], capture_output=True, text=True, timeout=180,
                             cwd=ROOT, stdin=subprocess.DEVNULL)
        if res.returncode != 0:
            print(f"the run failed (exit {res.returncode}): {res.stderr[-2000:]}")
            return 1
        (totals,) = json.loads((run_dir / "run.json").read_text())["totals"]
        latency = ds.dataset(run_dir / "latency", format="parquet").to_table().to_pydict()
        e2e = sum(c for c, k in zip(latency["count"], latency["kind"], strict=True)
                  if k == "e2e")
        recorded = {SERIES[0]: totals["produced"], SERIES[1]: totals["consumed"], SERIES[2]: e2e}
        print(f"{'series':<40} {'stored by Prometheus':>22} {'the run files':>15}")
        for name in SERIES:
            found = query(api, f"max_over_time(streambench_{name}[10m])")
            stored = float(found[0]["value"][1]) if len(found) == 1 else float("nan")
            same = stored == recorded[name]
            failed += not same
            print(f"streambench_{name:<28} {stored:>22,.0f} {recorded[name]:>15,}"
                  f"{'' if same else '   DIFFERENT'}")
        empty = []
        panels, annotations = dashboard_exprs()
        for expr in panels:
            ranged = expr.replace("[10s]", "[10m]")
            if not query(api, f"count(last_over_time(({ranged})[10m:1s]))"):
                empty.append(expr)
        print(f"dashboard panel queries with data: {len(panels) - len(empty)} of {len(panels)}")
        for expr in empty:
            print(f"  no data: {expr}")
        failed += len(empty)
        # an annotation marks an event or a phase change: accepted by the server, with data
        # only where the run had one
        marked = sum(bool(query(api, f"count(last_over_time(({a.replace('[10s]', '[10m]')})"
                                     "[10m:1s]))")) for a in annotations)
        print(f"dashboard annotation queries accepted: {len(annotations)}, with data: {marked}")
    finally:
        stop_process(server)
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
