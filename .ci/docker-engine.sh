#!/usr/bin/env bash
# Makes sure a Docker engine answers for the container tests: when `docker info` fails and
# dockerd is installed (Debian's docker.io, see host-deps.sh), starts one as root with no
# default bridge network and no iptables rules (every test container uses host networking),
# logging to a file, and waits until it answers. An engine already running is left as it is.
set -euo pipefail

LOG=${STREAMBENCH_DOCKERD_LOG:-/var/log/streambench-dockerd.log}
WAIT_S=${STREAMBENCH_DOCKERD_WAIT_S:-60}

if docker info >/dev/null 2>&1; then
    exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
    echo "no Docker engine answers and dockerd is not installed (Debian/Ubuntu: apt-get install docker.io)" >&2
    exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "no Docker engine answers: start one (sudo dockerd --bridge=none) or set DOCKER_HOST" >&2
    exit 1
fi
# DOCKER_HOST may point elsewhere in the caller's environment; the engine started here listens
# on the default socket
unset DOCKER_HOST
echo "starting dockerd (log: $LOG)"
setsid nohup dockerd --bridge=none --iptables=false --ip-masq=false >>"$LOG" 2>&1 < /dev/null &
for _ in $(seq "$WAIT_S"); do
    if docker info >/dev/null 2>&1; then
        exit 0
    fi
    sleep 1
done
echo "dockerd did not answer within ${WAIT_S} s; its log: $LOG" >&2
tail -n 5 "$LOG" >&2 || true
exit 1
