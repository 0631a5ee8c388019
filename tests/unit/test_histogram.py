import numpy as np
import pytest

from loadgen.core.histogram import (
    EXACT_LIMIT,
    MAX_VALUE,
    N_BUCKETS,
    Histogram,
    HistogramSnapshot,
    bucket_bounds,
    bucket_index,
    bucket_value,
    percentiles,
)


def test_bucket_contains_its_values_and_is_narrow():
    rng = np.random.default_rng(1)
    values = np.concatenate([
        np.arange(0, 5000),
        rng.integers(0, 2**40, 200_000),
        np.array([2**k for k in range(1, 61)] + [2**k - 1 for k in range(1, 61)]),
    ]).astype(np.int64)
    idx = bucket_index(values)
    lower, width = bucket_bounds(idx)
    assert np.all(lower <= values)
    assert np.all(values < lower + width)
    big = values >= EXACT_LIMIT
    assert np.all(width[big] / lower[big] <= 1 / 1024)
    assert np.all(width[~big] == 1)
    # representative value within 0.05 % of every member
    rel = np.abs(bucket_value(idx)[big] - values[big]) / values[big]
    assert rel.max() <= 0.0005


def test_indices_are_monotonic():
    v = np.arange(0, 3_000_000, 7, dtype=np.int64)
    idx = bucket_index(v)
    assert np.all(np.diff(idx) >= 0)


@pytest.mark.parametrize("dist", ["lognormal", "uniform", "bimodal"])
def test_percentiles_match_numpy(dist):
    rng = np.random.default_rng(7)
    if dist == "lognormal":
        raw = rng.lognormal(mean=13.5, sigma=0.8, size=100_000)
    elif dist == "uniform":
        raw = rng.uniform(1e5, 5e7, size=100_000)
    else:
        raw = np.concatenate([rng.normal(4e5, 3e4, 90_000), rng.normal(9e7, 1e6, 10_000)])
    raw = np.maximum(raw, 0).astype(np.int64)
    h = Histogram()
    for chunk in np.array_split(raw, 7):
        h.record_many(chunk.tolist())
    snap = h.snapshot_and_reset()
    assert snap.total == len(raw)
    assert snap.min == raw.min() and snap.max == raw.max() and snap.sum == raw.sum()
    ps = [0, 1, 25, 50, 75, 90, 99, 99.9, 99.99, 100]
    ours = percentiles(snap, ps)
    exact = np.percentile(raw, ps)
    np.testing.assert_allclose(ours, exact, rtol=1e-3)


def test_reset_and_merge():
    h = Histogram()
    h.record_n(1_000_000, 10)
    a = h.snapshot_and_reset()
    assert h.snapshot_and_reset().total == 0
    h.record_many([5, 5, 3_000_000])
    b = h.snapshot_and_reset()
    m = HistogramSnapshot.merge([a, b, HistogramSnapshot.empty()])
    assert m.total == 13
    assert m.min == 5 and m.max == 3_000_000
    assert m.sum == 10_000_000 + 10 + 3_000_000
    assert m.percentile(0) == 5
    assert m.percentile(100) == 3_000_000


def test_empty_percentile_is_nan():
    assert np.isnan(HistogramSnapshot.empty().percentile(50))


def test_merge_equals_one_histogram_of_all_the_values():
    """Merging interval snapshots gives the buckets, counts, min, max and sum that one
    histogram of all their values has: values from the exact range to the top octaves, so the
    merged buckets span nearly every index there is."""
    rng = np.random.default_rng(7)
    parts = [rng.integers(0, 2_000, 50), rng.lognormal(13, 2, 5_000).astype(np.int64),
             np.array([MAX_VALUE, 1 << 40, 0]), rng.integers(1_000_000, 1_000_500, 3_000)]
    snaps = []
    whole = Histogram()
    for part in parts:
        h = Histogram()
        h.record_many(part.tolist())
        whole.record_many(part.tolist())
        snaps.append(h.snapshot_and_reset())
    merged = HistogramSnapshot.merge([snaps[0], HistogramSnapshot.empty(), *snaps[1:]])
    expected = whole.snapshot_and_reset()
    np.testing.assert_array_equal(merged.index, expected.index)
    np.testing.assert_array_equal(merged.count, expected.count)
    assert (merged.min, merged.max, merged.sum) == (expected.min, expected.max, expected.sum)
    assert merged.index[0] < 100 and merged.index[-1] > N_BUCKETS - 100
    # a bucket that several intervals share sums their counts
    counts = [dict(zip(s.index.tolist(), s.count.tolist(), strict=True)) for s in snaps]
    shared = set(counts[1]) & set(counts[3])
    assert shared
    for bucket in shared:
        at = int(np.flatnonzero(merged.index == bucket)[0])
        assert merged.count[at] == sum(c.get(bucket, 0) for c in counts)


def test_many_folds_in_one_interval_equal_the_values_counted_directly():
    """An interval with far more values than one fold takes (a maximum-rate tick) is folded
    many times and its parts merged along the way: its snapshot has the buckets and counts
    that counting the values' bucket indices directly gives (numpy's unique), and the parts
    kept between snapshots stay bounded."""
    rng = np.random.default_rng(11)
    values = np.concatenate([rng.lognormal(12, 1.5, 700_000).astype(np.int64),
                             rng.integers(0, 3_000, 20_000), np.array([MAX_VALUE, 0])])
    h = Histogram()
    most_parts = 0
    for chunk in np.array_split(values, 37):
        h.record_many(chunk.tolist())
        most_parts = max(most_parts, len(h._parts))
    snap = h.snapshot_and_reset()
    index, count = np.unique(bucket_index(values), return_counts=True)
    np.testing.assert_array_equal(snap.index, index)
    np.testing.assert_array_equal(snap.count, count)
    assert (snap.min, snap.max, snap.sum) == (0, MAX_VALUE, int(values.sum()))
    assert 1 < most_parts <= Histogram._MAX_PARTS
    assert h.snapshot_and_reset().total == 0 and not h._parts
