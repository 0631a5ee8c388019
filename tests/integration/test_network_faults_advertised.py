"""Network faults on the platforms whose brokers hand their own address to clients (Pulsar's
lookups, RabbitMQ's stream metadata, Pravega's segment store as the controller names it): a
real Toxiproxy in front of a real local broker that advertises the proxy, loopback only. One
run per platform: a latency toxic's effect on the publish latency, a partition that stops the
flow within a tick and a heal that brings it back, the proxy gone after the run; and a
RabbitMQ run whose streambench is killed outright leaves no proxy behind."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import psutil
import pytest

from compose.process import leftover_dirs
from tests.conftest import CliRun, pids_gone, run_json
from tests.integration.test_network_faults import (
    LATENCY_MS,
    _between,
    _p50_ms,
    _partition_checked,
    _proxies,
    _run,
    toxiproxy,
)

pytestmark = pytest.mark.integration
__all__ = ["toxiproxy"]  # the fixture: the server built into the cache once

SCHEDULE = ["5s:latency=20ms", "11s:heal", "13s:partition", "16s:heal"]


def _publish_added(run_dir: Path, events: list[dict], at: dict[str, list[float]],
                   ticks: list[dict]) -> tuple[float, float]:
    """(publish p50, publish minimum) under the latency toxic less before it: the p50 from the
    latency table's buckets merged over the whole seconds of each side (cross-checked by the
    median of those ticks' own p50s), the minimum as the median of the ticks' minima."""
    start = next(e for e in events if e["kind"] == "phase" and e["phase"] == "measuring")
    windows = ((start["time"].timestamp(), at["net-latency"][0]),
               (at["net-latency"][0] + 1, at["net-heal"][0]))
    base, slow = (_between(ticks, a, b) for a, b in windows)
    assert len(base) >= 3 and len(slow) >= 3, (base, slow)
    by_seq = {t["seq"]: t for t in ticks}

    def median_ms(column: str, seqs: set[int]) -> float:
        return float(np.median([by_seq[s][column] for s in seqs])) / 1e6

    added = _p50_ms(run_dir, "publish", slow) - _p50_ms(run_dir, "publish", base)
    per_tick = median_ms("publish_p50", slow) - median_ms("publish_p50", base)
    floor = median_ms("publish_min", slow) - median_ms("publish_min", base)
    print(f"{ticks[0]['target']}: latency toxic {LATENCY_MS:g} ms: publish p50 +{added:.2f} ms "
          f"from {_p50_ms(run_dir, 'publish', base):.2f} ms (median of the ticks' p50s "
          f"+{per_tick:.2f} ms), min +{floor:.2f} ms (load {os.getloadavg()[0]:.1f})")
    assert abs(added - per_tick) <= 0.1 * LATENCY_MS  # two reckonings of the same seconds
    return added, floor


def _flow_checked(platform: str, tmp_path: Path) -> tuple[float, float]:
    """One run with SCHEDULE; the publish latency's rise, once the partition is checked: for
    Pulsar, whose clients hold their sends through it, with the recovery event of
    test_network_faults; RabbitMQ's and Pravega's clients fail their sends and come back with
    the load's reconnect pauses (0.5 s doubling: within 6 s of the heal here), and the lag can
    take longer than the run to settle back to its level, so the flow's return is checked
    alone (the recovery event is printed)."""
    run_dir = tmp_path / "run"
    # a warm-up of 5 s: a standalone just started can take seconds to settle (a Pulsar p50 of
    # 27 ms in the first seconds once, 3.5 ms after)
    _out, events, at, ticks = _run(platform, run_dir, SCHEDULE, 25, 1024, ("--warmup", "5"))
    added = _publish_added(run_dir, events, at, ticks)
    cut, healed = at["net-partition"][0], at["net-heal"][1]
    if platform == "pulsar":
        _partition_checked(platform, events, cut, healed, ticks)
    else:
        inside = [t for t in ticks
                  if t["seq"] in _between(ticks, cut + ticks[0]["interval_s"] - 0.2, healed + 0.05)]
        assert inside and all(t["consumed"] == 0 and t["produced"] == 0 for t in inside), inside
        back = [t for t in ticks if healed < t["time"].timestamp() <= healed + 6
                and t["consumed"] > 0 and t["produced"] > 0]
        assert back, "nothing produced and consumed within 6 s of the heal"
        outcome = [f"{e['kind']}: {e['detail']}" for e in events if e["time"].timestamp() > healed
                   and e["kind"] in ("recovered", "not-recovered")]
        print(f"{platform}: flow back {back[0]['time'].timestamp() - healed:.1f} s after the "
              f"heal; {outcome[-1] if outcome else 'no recovery event'}")
    (target,) = run_json(run_dir)["targets"]
    assert " → 127.0.0.1:" in next(iter(target["proxies"].values()))
    return added


@pytest.mark.parametrize("platform", ["pulsar", "rabbitmq"])
def test_latency_and_partition_through_an_advertised_proxy(tmp_path: Path, toxiproxy: Path,
                                                           platform: str) -> None:
    """The broker tells its clients the proxy's address: the publish p50 rises by the toxic's
    delay within 10 % (its responses come that much later), the partition stops the flow."""
    added, _floor = _flow_checked(platform, tmp_path)
    assert abs(added - LATENCY_MS) <= 0.1 * LATENCY_MS


def test_latency_and_partition_through_pravegas_proxies(tmp_path: Path, toxiproxy: Path) -> None:
    """Pravega's controller and segment store through their proxies (the segment store
    publishes the proxy's address): the partition stops the flow and heal brings it back (a
    new reader takes the lost one offline, so its segments come to it). An acknowledgement is
    a writer's flush, which waits for more than one of the segment store's replies: the
    publish latency rises by at least the delay, more at p50."""
    added, floor = _flow_checked("pravega", tmp_path)
    assert floor >= 0.9 * LATENCY_MS and added >= LATENCY_MS


def test_no_proxy_left_after_a_rabbitmq_streambench_is_killed(tmp_path: Path,
                                                              toxiproxy: Path) -> None:
    """SIGKILL of streambench while measuring through the proxy a RabbitMQ node advertises:
    the Toxiproxy server, the node, its epmd and the load process are gone, no data dir of
    theirs is left."""
    cli = CliRun(["run", "rabbitmq", "--runtime", "local", "--headless", "--rate", "100",
                  "--warmup", "1", "--duration", "60", "--network-faults", "--out",
                  str(tmp_path / "run")])
    proxies = _proxies(cli)
    cli.wait_for_line("measuring", 180)
    started = psutil.Process(cli.proc.pid).children(recursive=True)
    assert len(proxies) == 1 and proxies[0] in {p.pid for p in started}
    assert {p.name() for p in started} >= {"server", "epmd", "beam.smp"}
    cli.proc.send_signal(signal.SIGKILL)
    returned, _out, err = cli.finish(timeout_s=60)
    assert returned == -9, err[-2000:]
    assert pids_gone(proxies + [p.pid for p in started], 15)
    assert not [path for path, pid in leftover_dirs()
                if path.name.startswith(("streambench-toxiproxy-", "streambench-rabbitmq-"))
                and int(pid) in {p.pid for p in started}]
