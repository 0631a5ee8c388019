"""Beside Redis in one report: every selected case's clean run (the platform beside Redis) in
one PySpark report, built once for the session after test_contract.py made the runs (a report
costs about a minute of Spark on a busy 2-core machine, so not one per platform)."""

from __future__ import annotations

import re
from typing import cast

import pyarrow.dataset as ds
import pytest

from loadgen.platforms import PLATFORMS
from tests.conftest import run_json
from tests.platforms.conftest import RATE, Case, Runs

pytestmark = pytest.mark.integration

THIS_TEST = "test_beside_redis_in_one_report"


@pytest.fixture(scope="session")
def combined_report(request: pytest.FixtureRequest, runs: Runs, spark,
                    tmp_path_factory: pytest.TempPathFactory) -> str:
    """The report's Markdown over the clean runs of every case this session selected."""
    from analysis.report import build_report

    # this module's test only: other modules have tests of the same name, not parametrised
    cases = [cast(Case, item.callspec.params["case"]) for item in request.session.items
             if isinstance(item, pytest.Function) and item.originalname == THIS_TEST
             and "case" in getattr(getattr(item, "callspec", None), "params", {})]
    dirs = []
    for case in dict.fromkeys(cases):
        run = runs.clean(case)
        assert run.result.returncode == 0, run.result.stderr[-3000:]
        dirs.append(run.run_dir)
    report = build_report(dirs, out_dir=tmp_path_factory.mktemp("report"), formats="md")
    return (report if report.suffix == ".md" else report.parent / "report.md").read_text()


def test_beside_redis_in_one_report(runs: Runs, case: Case, combined_report: str) -> None:
    """The run in the runs table, completed, with its rate; each of its targets in the
    targets table with its platform, runtime and the version the run recorded (a label found
    in several runs, as Redis's is, is shown with its run: `redis (RUN_ID)`)."""
    run = runs.clean(case)
    meta = run_json(run.run_dir)
    run_id = re.escape(meta["run_id"])
    assert re.search(rf"\| {run_id} \| platform-contract \| [^|]+ \| completed \| "
                     rf"[^|]*{re.escape(case.platform)}[^|]* \| {RATE:,} \|", combined_report), run_id
    for target in meta["targets"]:
        label = re.escape(target["label"])
        assert re.search(rf"\| {label}(?: \({run_id}\))? \| {run_id} \| "
                         rf"{re.escape(target['platform'])} \| {case.runtime} \| "
                         rf"{re.escape(target['version'])} \|", combined_report), target["label"]
    _broker_metrics_shown(run.run_dir, meta, combined_report)


def _broker_metrics_shown(run_dir, meta: dict, report: str) -> None:
    """Each target whose platform declares broker metrics has its table in the report's
    "Broker metrics" section: a row per metric the run recorded, with the broker's name."""
    section = report.partition("\n## Broker metrics\n")[2].partition("\n## ")[0]
    recorded = ds.dataset(run_dir / "broker_metrics", format="parquet").to_table().to_pydict()
    for target in meta["targets"]:
        trait = PLATFORMS[target["platform"]].broker_metrics
        if trait is None:
            continue
        label, run_id = re.escape(target["label"]), re.escape(meta["run_id"])
        found = re.search(rf"^{label}(?: \({run_id}\))? \({re.escape(trait.source)}\):\n\n"
                          rf"((?:\|.*\n)+)", section, re.MULTILINE)
        assert found, target["label"]
        names = {n for n, t in zip(recorded["name"], recorded["target"], strict=True)
                 if t == target["label"]}
        assert names
        for name in names:
            metric = trait.named(name)
            assert metric is not None
            assert f"| {name} | {metric.native} |" in found.group(1), name
