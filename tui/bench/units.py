"""Durations and sizes as a user writes them, read one way by every option that takes one.

Durations: a number with a unit, `500ms`, `30s`, `5m`, `1h`, `1m30s`, or a bare number in the
option's own unit (seconds for --duration, milliseconds for --pacing-window). Sizes: a number
with `k`, `m`, `g`, `t` (also written `KiB`, `MiB`, `kb`…; powers of 1,024) or a bare number
of bytes: `1k` is 1,024 bytes, `1MiB` 1,048,576, `2.5g` 2,684,354,560."""

from __future__ import annotations

import math
import re

DURATION_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(us|ms|s|m|h)", re.IGNORECASE)
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(?:([kmgt])(?:i?b)?|b)?", re.IGNORECASE)
DURATION_EXAMPLE = "e.g. 30s, 5m, 1m30s, 500ms"
SIZE_EXAMPLE = "e.g. 1k, 64k, 1MiB, 2.5g"


def parse_duration(text: str, unit: str = "s") -> float:
    """A duration in `unit` (a key of DURATION_UNITS); a bare number is in that unit already.
    ValueError with the line to show otherwise."""
    t = text.strip().lower()
    try:
        value = float(t)
    except ValueError:
        parts = _PART.findall(t)
        if not parts or "".join(n + u for n, u in parts) != t:
            raise ValueError(f"expected a duration ({DURATION_EXAMPLE}), got {text!r}") from None
        value = sum(float(n) * DURATION_UNITS[u] for n, u in parts) / DURATION_UNITS[unit]
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"expected a duration of 0 or more ({DURATION_EXAMPLE}), got {text!r}")
    return value


def parse_size(text: str) -> int:
    """A size in bytes; ValueError with the line to show otherwise."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"expected a size ({SIZE_EXAMPLE}), got {text!r}")
    value = float(m.group(1)) * SIZE_UNITS[(m.group(2) or "").lower()]
    if not math.isfinite(value):
        raise ValueError(f"expected a size ({SIZE_EXAMPLE}), got {text!r}")
    return int(value)


def duration_text(seconds: float) -> str:
    """The way a user writes it: 30s, 5m, 1m30s, 800ms."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{seconds * 1e3:g}ms"
    minutes, rest = divmod(seconds, 60)
    if minutes and rest:
        return f"{minutes:.0f}m{rest:g}s"
    return f"{minutes:.0f}m" if minutes else f"{rest:g}s"


def size_text(n: float) -> str:
    """The way a user writes it: 1k, 1m, 1.5g; bytes below 1k as a bare number."""
    for suffix in ("t", "g", "m", "k"):
        unit = SIZE_UNITS[suffix]
        if n >= unit and (n / unit).is_integer():
            return f"{n / unit:g}{suffix}"
    for suffix in ("t", "g", "m", "k"):
        if n >= SIZE_UNITS[suffix]:
            return f"{n / SIZE_UNITS[suffix]:.3g}{suffix}"
    return f"{n:g}"
