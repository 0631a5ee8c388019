"""How the dashboard writes numbers: fixed, short, and "–" for a figure that is not known."""

from __future__ import annotations

import math

MISSING = "–"


def known(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def count(value: float | None) -> str:
    """5,002 — whole numbers with thousands separators up to a million, then 1.23M."""
    if value is None or not known(value):
        return MISSING
    if abs(value) >= 1e6:
        return f"{value / 1e6:.2f}M"
    return f"{round(value):,}"


def short(value: float | None) -> str:
    """At most four characters for chart scales: 950, 5.0k, 12k, 1.2M, 0.42."""
    if value is None or not known(value):
        return MISSING
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            scaled = value / limit
            return f"{scaled:.1f}{suffix}" if scaled < 10 else f"{scaled:.0f}{suffix}"
    if abs(value) >= 10 or value == 0:
        return f"{value:.0f}"
    return f"{value:.2g}"


def with_unit(value: float | None, unit: str) -> str:
    """A short figure and its unit: 950/s, 21ms; milliseconds from 1,000 on as seconds
    (6.1s, never 6.1kms)."""
    if unit == "ms" and value is not None and known(value) and abs(value) >= 1000:
        return f"{short(value / 1000)}s"
    return f"{short(value)}{unit}"


def span(low: float | None, high: float | None, unit: str) -> str:
    """A range of short figures, the unit once when both ends have the same: 9.1–18ms,
    0.9–6.1s, 950ms–1.2s."""
    a, b = with_unit(low, unit), with_unit(high, unit)
    for shown in (unit, "s") if unit == "ms" else (unit,):
        if shown and a.endswith(shown) and b.endswith(shown) and (
                shown != "s" or not a.endswith("ms")):
            return f"{a.removesuffix(shown)}–{b}"
    return f"{a}–{b}"


def ratio(value: float | None) -> str:
    """A ratio with two significant figures below 0.1, else two decimals: 1.23×, 0.50×,
    0.0027× (never 0.00× for a ratio that is not zero)."""
    if value is None or not known(value):
        return MISSING
    if value == 0 or abs(value) >= 0.1:
        return f"{value:.2f}×"
    digits = min(12, 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{digits}f}×"


def millis(value: float | None) -> str:
    """Three significant figures: 0.123, 1.23, 12.3, 123, 1,234."""
    if value is None or not known(value):
        return MISSING
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def latency(value: float | None) -> str:
    """A latency in ms with its unit, from 1,000 ms on in seconds: 17.8ms, 1.23s."""
    if value is None or not known(value):
        return MISSING
    return f"{millis(value)}ms" if value < 1000 else f"{value / 1000:.2f}s"


def megabytes(value: float | None) -> str:
    """Bytes as MB (10^6): 4.9, 123."""
    if value is None or not known(value):
        return MISSING
    mb = value / 1e6
    return f"{mb:.1f}" if mb < 100 else f"{mb:,.0f}"


def percent(value: float | None) -> str:
    if value is None or not known(value):
        return MISSING
    return f"{value:.1f}%"


def duration(seconds: float) -> str:
    """m:ss below an hour, h:mm:ss above."""
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
