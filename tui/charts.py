"""Braille area charts: two data points per terminal column, four dot rows per text row.

Plain strings, no colour, so a chart reads the same in monochrome."""

from __future__ import annotations

import math
from collections.abc import Sequence

BRAILLE_BASE = 0x2800
# dot bits of a braille cell, bottom row first: (left column, right column)
_DOTS = ((0x40, 0x80), (0x04, 0x20), (0x02, 0x10), (0x01, 0x08))
DOTS_PER_ROW = len(_DOTS)


def _dots_high(value: float, top: float, levels: int) -> int:
    """How many dot rows a value fills: 0 for none or non-finite, at least 1 for any value
    above zero so a small non-zero figure stays visible."""
    if not math.isfinite(value) or value <= 0 or top <= 0:
        return 0
    return max(1, min(levels, round(value / top * levels)))


def area_chart(values: Sequence[float], width: int, height: int, top: float,
               ghost: Sequence[float] | None = None) -> list[str]:
    """`height` rows of `width` braille cells; the newest value at the right edge.

    `values` holds at most 2 × width points (downsample first); older columns are blank when
    there are fewer points than that. `ghost` (another series, laid out the same way) is drawn
    as a single dot at its level in each point's column: a dotted line above the area where it
    is higher, hidden in the area where it is lower."""
    if width <= 0 or height <= 0:
        return [""] * max(height, 0)
    points = list(values)[-2 * width:]
    levels = height * DOTS_PER_ROW
    heights = [0] * (2 * width - len(points)) + [_dots_high(v, top, levels) for v in points]
    ghost_points = list(ghost or [])[-2 * width:]
    ghost_at = [0] * (2 * width - len(ghost_points)) + [
        _dots_high(v, top, levels) for v in ghost_points]
    rows = []
    for row in range(height):  # row 0 is the top
        base = (height - 1 - row) * DOTS_PER_ROW  # dot rows below this text row
        cells = []
        for col in range(width):
            bits = 0
            for side in (0, 1):
                filled = heights[2 * col + side] - base
                for level in range(min(max(filled, 0), DOTS_PER_ROW)):
                    bits |= _DOTS[level][side]
                dot = ghost_at[2 * col + side] - base - 1  # the ghost's top dot, in this row
                if 0 <= dot < DOTS_PER_ROW:
                    bits |= _DOTS[dot][side]
            # a blank cell as a space: some fonts draw the empty braille pattern visibly
            cells.append(chr(BRAILLE_BASE + bits) if bits else " ")
        rows.append("".join(cells))
    return rows


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
