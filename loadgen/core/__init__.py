"""The vocabulary every layer of streambench shares, and the contract a platform implements.

Nothing here imports the engine (the rest of loadgen), the stacks (compose), the collectors,
the report (analysis) or the screens (tui); those packages import this one.

The vocabulary:
- errors: the typed errors a user can cause, caught once at the command line
- target: TARGET strings (`platform[@address][:options]`), option specs and their parsers
- workload: workloads (OpenMessaging Benchmark YAML) and their validation
- interventions: steering commands (rate, producers/consumers, faults) and schedules
- histogram: the log-linear latency histograms and their snapshots
- ticks: the one-per-second measurement of a target (Tick) and raw samples
- events: phase changes, run events and the run's description
- bus: the union of everything published on the run's bus
- settings, security: broker settings (`broker.NAME=VALUE`) and client security options
- stackinfo: what a running stack describes of itself (endpoints, processes, containers)
- fdwatch: waiting on a file descriptor from an event loop

The platform contract (what a platform, bundled or a plugin, implements):
- platform: the `Platform` record, registered through the `streambench.platforms` entry points
- driver: the driver base classes (topics, producers, consumers)
- stack: the `Stack` base (up, ready, down, describe, and the faults of one broker)
- collector: the `Collector` base (lag, broker counters, resources read once per tick)
- brokermetrics: the broker metrics a platform declares (its broker's own figures) and the
  collector that reads them
"""
