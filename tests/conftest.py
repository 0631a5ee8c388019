"""Shared fixtures: one local Spark session for the whole test run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

# Targets without runtime= run locally in the tests, whether or not a Docker engine answers;
# the container tests ask for runtime=docker themselves.
os.environ["STREAMBENCH_RUNTIME"] = "local"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = (
        SparkSession.builder.master("local[1]")
        .appName("streambench-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
