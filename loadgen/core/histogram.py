"""Log-linear latency histogram with bounded memory and <= 0.1 % relative bucket width.

Values are non-negative integers (nanoseconds). Values below 2048 get a bucket each (exact);
above, every power of two is split into 1024 equal sub-buckets, so a bucket's width is at most
1/1024 of its lower bound (< 0.098 %) and its midpoint is within 0.05 % of any value in it.
Recording appends to a small buffer that is folded into the counts with numpy, which keeps the
per-message cost to one list append.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

SUB_BITS = 10
SUB_COUNT = 1 << SUB_BITS  # sub-buckets per octave above the exact range
EXACT_LIMIT = SUB_COUNT << 1  # values below this are their own bucket
MAX_VALUE = (1 << 62) - 1
_BUFFER_LIMIT = 65_536


def _n_buckets() -> int:
    shift = MAX_VALUE.bit_length() - (SUB_BITS + 1)
    return EXACT_LIMIT + shift * SUB_COUNT


N_BUCKETS = _n_buckets()


def bucket_index(values: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Bucket index of each value (vectorised). Values are clipped to [0, MAX_VALUE]."""
    v = np.clip(values.astype(np.int64, copy=False), 0, MAX_VALUE)
    # bit_length via log2 is exact for the integer range used here once corrected below
    bl = np.zeros(v.shape, dtype=np.int64)
    nz = v > 0
    bl[nz] = np.floor(np.log2(v[nz].astype(np.float64))).astype(np.int64) + 1
    # float rounding near powers of two can be off by one: fix it exactly with shifts
    too_low = (bl < 63) & ((v >> np.minimum(bl, 62)) > 0)
    bl[too_low] += 1
    too_high = (bl > 0) & ((v >> np.maximum(bl - 1, 0)) == 0)
    bl[too_high] -= 1
    shift = np.maximum(bl - (SUB_BITS + 1), 0)
    top = v >> shift
    return np.where(shift == 0, v, EXACT_LIMIT + (shift - 1) * SUB_COUNT + (top - SUB_COUNT))


def bucket_bounds(index: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Lower bound (inclusive) and width of each bucket index."""
    idx = np.asarray(index, dtype=np.int64)
    exact = idx < EXACT_LIMIT
    rel = np.maximum(idx - EXACT_LIMIT, 0)
    shift = rel // SUB_COUNT + 1
    top = rel % SUB_COUNT + SUB_COUNT
    lower = np.where(exact, idx, top << shift)
    width = np.where(exact, 1, np.left_shift(np.int64(1), shift))
    return lower, width


def bucket_value(index: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The value that stands for a bucket: exact values as they are, else the midpoint."""
    lower, width = bucket_bounds(index)
    return lower + width // 2


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """Non-empty buckets of one interval: parallel arrays of bucket index and count."""

    index: npt.NDArray[np.int64]
    count: npt.NDArray[np.int64]
    min: int
    max: int
    sum: int

    @property
    def total(self) -> int:
        return int(self.count.sum())

    @property
    def mean(self) -> float:
        n = self.total
        return self.sum / n if n else float("nan")

    def values(self) -> npt.NDArray[np.int64]:
        return bucket_value(self.index)

    def percentile(self, p: float) -> float:
        """Value at percentile p (0-100), linear interpolation like numpy's default,
        on bucket representative values clamped to the observed min and max."""
        return float(percentiles(self, [p])[0])

    @staticmethod
    def empty() -> HistogramSnapshot:
        z = np.zeros(0, dtype=np.int64)
        return HistogramSnapshot(z, z, 0, 0, 0)

    @staticmethod
    def merge(snaps: list[HistogramSnapshot]) -> HistogramSnapshot:
        snaps = [s for s in snaps if len(s.count) and s.count.any()]
        if not snaps:
            return HistogramSnapshot.empty()
        idx = np.concatenate([s.index for s in snaps])
        cnt = np.concatenate([s.count for s in snaps])
        # the counts summed into a dense array over the span of bucket indices (at most
        # N_BUCKETS long): integer adds, no sort, exact
        low = int(idx.min())
        dense = np.zeros(int(idx.max()) - low + 1, dtype=np.int64)
        np.add.at(dense, idx - low, cnt)
        present = np.flatnonzero(dense)
        return HistogramSnapshot(
            present + low,
            dense[present],
            min(s.min for s in snaps),
            max(s.max for s in snaps),
            sum(s.sum for s in snaps),
        )


def percentiles(snap: HistogramSnapshot, ps: list[float]) -> npt.NDArray[np.float64]:
    """Percentiles (0-100) of a snapshot; NaN when it is empty."""
    n = snap.total
    if n == 0:
        return np.full(len(ps), np.nan)
    cum = np.cumsum(snap.count)
    out = np.empty(len(ps))
    for i, p in enumerate(ps):
        rank = p / 100.0 * (n - 1)  # numpy 'linear' method position
        lo = int(np.floor(rank))
        hi = min(lo + 1, n - 1)
        low = _sample_value(snap, cum, n, lo)
        out[i] = low + (_sample_value(snap, cum, n, hi) - low) * (rank - lo)
    return out


def _sample_value(snap: HistogramSnapshot, cum: npt.NDArray[np.int64], n: int,
                  position: int) -> float:
    """Value of the sample at a 0-based sorted position: the exact min and max at the ends,
    the bucket's representative value (within the observed min and max) elsewhere."""
    if position <= 0:
        return float(snap.min)
    if position >= n - 1:
        return float(snap.max)
    bucket = snap.index[int(np.searchsorted(cum, position + 1))]
    exact = bucket < EXACT_LIMIT
    value = int(bucket) if exact else _midpoint(int(bucket))
    return float(min(max(value, snap.min), snap.max))


def _midpoint(bucket: int) -> int:
    """bucket_value of one bucket above the exact range, in Python integers."""
    rel = bucket - EXACT_LIMIT
    shift = rel // SUB_COUNT + 1
    return ((rel % SUB_COUNT + SUB_COUNT) << shift) + (1 << shift) // 2


class Histogram:
    """Accumulates values for one interval; `snapshot_and_reset()` hands them over.

    Sparse: a fold turns the buffered values into the buckets they hit (a count per bucket
    over the span of those values), so an interval touches memory in proportion to what it
    recorded, never the whole bucket range (54,272 buckets, 434 KB as a dense array, read in
    full at every snapshot). Memory that has not been touched for a second can be slow to
    touch again (a virtual machine's host may have unmapped it), so that matters in a load
    process whose tick must not hold up the next send."""

    __slots__ = ("_buf", "_parts")

    # folded parts kept before they are merged into one (bounds memory between snapshots)
    _MAX_PARTS = 8

    def __init__(self) -> None:
        self._buf: list[int] = []
        self._parts: list[HistogramSnapshot] = []

    def record_n(self, value: int, n: int) -> None:
        """Record the same value n times (a batch acknowledged at once)."""
        self._buf.extend([value] * n)
        if len(self._buf) >= _BUFFER_LIMIT:
            self._fold()

    def record_many(self, values: list[int]) -> None:
        self._buf.extend(values)
        if len(self._buf) >= _BUFFER_LIMIT:
            self._fold()

    def _fold(self) -> None:
        if not self._buf:
            return
        arr = np.clip(np.fromiter(self._buf, dtype=np.int64, count=len(self._buf)), 0, MAX_VALUE)
        self._buf.clear()
        idx = bucket_index(arr)
        low = int(idx.min())
        dense = np.bincount(idx - low)
        present = np.flatnonzero(dense)
        self._parts.append(HistogramSnapshot(present + low, dense[present], int(arr.min()),
                                             int(arr.max()), int(arr.sum())))
        if len(self._parts) > self._MAX_PARTS:
            self._parts = [HistogramSnapshot.merge(self._parts)]

    def snapshot_and_reset(self) -> HistogramSnapshot:
        self._fold()
        parts, self._parts = self._parts, []
        if not parts:
            return HistogramSnapshot.empty()
        return parts[0] if len(parts) == 1 else HistogramSnapshot.merge(parts)
