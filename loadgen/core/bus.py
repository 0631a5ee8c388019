"""Everything the run loop publishes on its bus, for the dashboard, the Parquet sink and the
headless status line to subscribe to."""

from __future__ import annotations

from loadgen.core.events import PhaseChange, RunEvent, RunMeta
from loadgen.core.ticks import RawSamples, Tick

BusItem = Tick | PhaseChange | RunEvent | RawSamples | RunMeta
