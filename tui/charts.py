"""Braille area charts: two data points per terminal column, four dot rows per text row.

Plain strings, no colour, so a chart reads the same in monochrome."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

BRAILLE_BASE = 0x2800
# dot bits of a braille cell, bottom row first: (left column, right column)
_DOTS = ((0x40, 0x80), (0x04, 0x20), (0x02, 0x10), (0x01, 0x08))
DOTS_PER_ROW = len(_DOTS)


def _heights(values: Sequence[float], top: float, levels: int, n: int) -> npt.NDArray[np.int64]:
    """How many dot rows each of the last `n` values fills (the places before the first
    value 0): none for zero, negative or non-finite values, at least 1 for any value above
    zero so a small non-zero figure stays visible."""
    out = np.zeros(n, dtype=np.int64)
    if not n or top <= 0:
        return out
    points = np.array(values[-n:], dtype=np.float64)
    if not len(points):
        return out
    # a dozen numpy calls on a few hundred points, for each chart at every tick: the fewer the
    # calls, the cheaper (values above the top are cut to it before scaling, so nothing
    # overflows; NaN stays NaN and is dropped with the other values that draw nothing)
    drawn = (points > 0) & (points < math.inf)
    high = np.rint(np.minimum(points, top) / top * levels)
    np.maximum(high, 1, out=high)
    out[n - len(points):] = np.where(drawn, high, 0)
    return out


def area_chart(values: Sequence[float], width: int, height: int, top: float,
               ghost: Sequence[float] | None = None) -> list[str]:
    """`height` rows of `width` braille cells; the newest value at the right edge.

    `values` holds at most 2 × width points (downsample first); older columns are blank when
    there are fewer points than that. `ghost` (another series, laid out the same way) is drawn
    as a single dot at its level in each point's column: a dotted line above the area where it
    is higher, hidden in the area where it is lower."""
    if width <= 0 or height <= 0:
        return [""] * max(height, 0)
    levels = height * DOTS_PER_ROW
    heights = _heights(values, top, levels, 2 * width)
    # dot rows below each text row (row 0 is the top), then each point's dots in each row
    below = np.arange(height - 1, -1, -1, dtype=np.int64)[:, None] * DOTS_PER_ROW
    filled = np.clip(heights[None, :] - below, 0, DOTS_PER_ROW)
    index = filled[:, 0::2] * 125 + filled[:, 1::2] * 25 + 24  # no ghost dot: (4, 4)
    if ghost is not None:
        # the ghost's top dot: in this row when 0..3
        dot = _heights(ghost, top, levels, 2 * width)[None, :] - below - 1
        dot = np.where((dot >= 0) & (dot < DOTS_PER_ROW), dot, DOTS_PER_ROW)
        index += dot[:, 0::2] * 5 + dot[:, 1::2] - 24
    return ["".join(row) for row in _CELLS[index].tolist()]


def _cell(left: int, right: int, ghost_left: int, ghost_right: int) -> str:
    """The cell with `left`/`right` dot rows filled (0..4) and a ghost dot in row
    `ghost_left`/`ghost_right` (0..3; 4: none), bottom row first."""
    bits = 0
    for side, fill, dot in ((0, left, ghost_left), (1, right, ghost_right)):
        for level in range(fill):
            bits |= _DOTS[level][side]
        if dot < DOTS_PER_ROW:
            bits |= _DOTS[dot][side]
    # a blank cell as a space: some fonts draw the empty braille pattern visibly
    return chr(BRAILLE_BASE + bits) if bits else " "


# every cell there can be, at index ((left * 5 + right) * 5 + ghost left) * 5 + ghost right
_CELLS = np.array([_cell(a, b, c, d) for a in range(5) for b in range(5) for c in range(5)
                   for d in range(5)])


OVERLAP = "*"  # a cell where several series meet


def overlay_chart(series: Sequence[Sequence[float]], glyphs: Sequence[str], width: int,
                  height: int, bottom: float, top: float) -> list[str]:
    """`height` rows of `width` cells spanning bottom..top, every series drawn as its own glyph
    at its level, one point per column, the newest at the right edge; where series meet,
    OVERLAP. Each series holds at most `width` points (NaN: nothing known, no glyph); with
    bottom == top every point sits on the middle row. Glyphs, not colours, tell the series
    apart, so the chart reads the same in monochrome."""
    if width <= 0 or height <= 0:
        return [""] * max(height, 0)
    grid = [[" "] * width for _ in range(height)]
    for points, glyph in zip(series, glyphs, strict=True):
        points = list(points)[-width:]
        offset = width - len(points)
        for i, value in enumerate(points):
            if not math.isfinite(value):
                continue
            level = (round((value - bottom) / (top - bottom) * (height - 1)) if top > bottom
                     else (height - 1) // 2)
            level = min(height - 1, max(0, level))
            row, col = height - 1 - level, offset + i
            cell = grid[row][col]
            grid[row][col] = glyph if cell in (" ", glyph) else OVERLAP
    return ["".join(row) for row in grid]
