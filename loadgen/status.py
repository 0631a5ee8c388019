"""The headless status line: one line per target per tick, in the spirit of OpenMessaging
Benchmark's live line."""

from __future__ import annotations

import math

from loadgen.core.ticks import Tick
from loadgen.timelag import time_lag_text


def _ms(ns: float) -> str:
    if math.isnan(ns):
        return "-"
    ms = ns / 1e6
    return f"{ms:.3f}" if ms < 10 else f"{ms:.1f}" if ms < 1000 else f"{ms:.0f}"


def nodes_text(tick: Tick) -> str:
    """The load nodes whose share a tick lacks or holds besides its own interval; empty when
    every node's tick was in on time."""
    parts = [f"{n} node(s) {what}" for n, what in (
        (tick.nodes_late, "late, counted in a later tick"),
        (tick.nodes_late_counted, "late before, counted here"),
        (tick.nodes_lost, "lost")) if n]
    return f" | {', '.join(parts)}" if parts else ""


def status_line(tick: Tick, width: int = 12) -> str:
    e2e = tick.e2e_latency
    pub = tick.publish_latency
    p50, p99, p999 = (e2e.percentile(p) if e2e.total else float("nan") for p in (50, 99, 99.9))
    e2e_max = float(e2e.max) if e2e.total else float("nan")
    pub_p99 = pub.percentile(99) if pub.total else float("nan")
    # the generator's own lateness behind its schedule (paced runs: at max rate there is none)
    delay = tick.publish_delay
    delay_text = (f" delay p99 {_ms(delay.percentile(99))}"
                  if tick.target_rate > 0 and delay.total else "")
    target = f"{tick.target_rate:,.0f}/s" if tick.target_rate > 0 else "max"
    lag = f"{tick.lag.total:,}" if tick.lag is not None else "-"
    cpu = tick.resources.cpu_percent
    cpu_text = "-" if math.isnan(cpu) else f"{cpu:.0f}%"
    mem = tick.resources.memory_bytes
    mem_text = f"{mem / 2**20:.0f}MiB" if mem else "-"
    errors = f" | err {tick.send_errors}" if tick.send_errors else ""
    gen = tick.loadgen.cpu_percent
    gen_text = "" if math.isnan(gen) else f" | gen cpu {gen:.0f}%"
    if tick.loadgen.saturated:
        gen_text += f" | LOAD GENERATOR SATURATED ({tick.loadgen.saturated}): add --processes"
    gen_text += nodes_text(tick)
    return (
        f"{tick.phase.value:<9} {tick.elapsed_s:6.0f}s {tick.target[:width]:<{width}} "
        f"pub {tick.produce_rate:9,.0f}/s {tick.produce_mb_s:7.2f} MB/s (target {target}) | "
        f"cons {tick.consume_rate:9,.0f}/s | lag {lag} ({time_lag_text(tick)}) | "
        f"e2e ms p50 {_ms(p50)} p99 {_ms(p99)} p99.9 {_ms(p999)} max {_ms(e2e_max)} | "
        f"pub p99 {_ms(pub_p99)}{delay_text} | cpu {cpu_text} mem {mem_text}{errors}{gen_text}"
    )
