"""streambench load generator: workloads, platform drivers, pacing, latency recording, the run loop."""
