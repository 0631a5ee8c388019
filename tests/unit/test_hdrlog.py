"""The interval logs' pieces: streambench's histogram converted to an HdrHistogram bucket for
bucket, the header lines, the file names."""

from __future__ import annotations

import math
import re

import numpy as np
from hdrh.histogram import HdrHistogram

from analysis.hdrlog import encoded, file_names, header, new_histogram
from loadgen.core.histogram import MAX_VALUE, Histogram, HistogramSnapshot, bucket_bounds


def _snapshot(values: np.ndarray) -> HistogramSnapshot:
    h = Histogram()
    h.record_many([int(v) for v in values])
    return h.snapshot_and_reset()


def test_every_bucket_converts_to_the_hdrhistogram_bucket_of_the_same_values() -> None:
    rng = np.random.default_rng(7)
    values = np.concatenate([rng.integers(0, 5000, 20_000),  # the exact range and its edge
                             rng.lognormal(14, 2.5, 50_000).astype(np.int64),
                             [2047, 2048, 2049, 4095, 4096, MAX_VALUE]])
    snap = _snapshot(values)
    decoded = HdrHistogram.decode(encoded(new_histogram(), snap))
    assert decoded.get_total_count() == len(values)
    lower, width = bucket_bounds(snap.index)
    for lo, w, count in zip(lower.tolist(), width.tolist(), snap.count.tolist(), strict=True):
        # the HdrHistogram bucket holding the lower bound spans the same values
        assert decoded.get_lowest_equivalent_value(lo) == lo
        assert decoded.get_highest_equivalent_value(lo) == lo + w - 1
        assert decoded.get_count_at_value(lo) == count
    # the same as recording each bucket's lower bound through the library's own API
    reference = HdrHistogram(1, MAX_VALUE, 3)
    for lo, count in zip(lower.tolist(), snap.count.tolist(), strict=True):
        reference.record_value(lo, count)
    assert reference.encode().decode() == encoded(new_histogram(), snap)


def test_a_percentile_read_back_is_the_nearest_rank_samples_bucket() -> None:
    values = np.random.default_rng(3).lognormal(13, 1.0, 10_001).astype(np.int64)
    decoded = HdrHistogram.decode(encoded(new_histogram(), _snapshot(values)))
    ordered = np.sort(values)
    for p in (50.0, 99.0, 99.9):
        # hdrhistogram's python rank: the count rounded half up
        sample = int(ordered[max(int(p * len(values) / 100 + 0.5), 1) - 1])
        got = decoded.get_value_at_percentile(p)
        assert decoded.get_lowest_equivalent_value(sample) <= got
        assert got == decoded.get_highest_equivalent_value(sample)
        assert abs(got - sample) / sample < 1 / 1024


def test_a_reused_histogram_holds_only_the_last_snapshot() -> None:
    hist = new_histogram()
    encoded(hist, _snapshot(np.arange(1, 50_000)))
    assert not np.ctypeslib.as_array(hist.counts).any()  # left all zeros
    assert HdrHistogram.decode(encoded(hist, HistogramSnapshot.empty())).get_total_count() == 0
    again = HdrHistogram.decode(encoded(hist, _snapshot(np.array([10, 10, 3000]))))
    assert again.get_total_count() == 3
    assert again.get_count_at_value(10) == 2
    assert again.get_count_at_value(3000) == 1 and again.get_max_value() == 3001


def test_the_header_gives_seconds_since_the_epoch_and_the_utc_date() -> None:
    text = header("redis", 1_796_175_663_262, "RUN")
    start = re.search(r"^#\[StartTime: (\S+) \(seconds since epoch\), (.+)\]$", text, re.M)
    base = re.search(r"^#\[BaseTime: (\S+) \(seconds since epoch\)\]$", text, re.M)
    assert start is not None and base is not None
    assert math.isclose(float(start.group(1)), 1_796_175_663.262)
    assert start.group(2) == "Wed Dec 02 01:41:03 UTC 2026"
    assert base.group(1) == start.group(1)
    assert text.splitlines()[-1].startswith('"StartTimestamp","Interval_Length"')


def test_file_names_are_safe_and_distinct() -> None:
    names = file_names(["redis", "redis:aof", "redis/aof", "../x", "Redis"])
    assert names == {"redis": "redis.hlog", "redis:aof": "redis_aof.hlog",
                     "redis/aof": "redis_aof-2.hlog", "../x": "_x.hlog", "Redis": "Redis-2.hlog"}
