#!/usr/bin/env bash
# Installs the system packages a make target needs, when missing:
#   demo  `make demo`: redis-server (its brokers run as local processes) and a Java 17 runtime
#         (the PySpark report of `--report`)
#   test  `make test` (the default): the demo's, plus redis-tools, nats-server (NATS JetStream
#         as a local process), rabbitmq-server (RabbitMQ Streams as a local process), Maven
#         (assembles the Kafka, Pulsar and Pravega jars from Maven Central), Go (builds a newer
#         nats-server from the Go module proxy), and for the docker
#         runtime's tests docker.io, docker-compose and debootstrap (the test images are built
#         offline from Debian's archive)
# As root it installs them from Debian's archive; otherwise it says in one line what to install
# and fails. Starting a Docker engine is .ci/docker-engine.sh's job (`make test` only).
set -euo pipefail

profile=${1:-test}
case "$profile" in
    demo) purpose="the demo needs" ;;
    test) purpose="the tests need" ;;
    *) echo "usage: $0 demo|test" >&2; exit 2 ;;
esac

# the major version of the java on JAVA_HOME or PATH, 0 when there is none
java_major() {
    local java version
    if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
        java=$JAVA_HOME/bin/java
    else
        java=$(command -v java 2>/dev/null) || { echo 0; return; }
    fi
    version=$("$java" -version 2>&1 | grep -oE 'version "[0-9]+(\.[0-9]+)?' | head -n 1 | tr -dc '0-9.')
    case "$version" in
        1.*) version=${version#1.} ;;
    esac
    echo "${version%%.*}" | grep -E '^[0-9]+$' || echo 0
}

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
[ "$(java_major)" -ge 17 ] || missing+=(openjdk-17-jre-headless)
if [ "$profile" = test ]; then
    command -v redis-benchmark >/dev/null 2>&1 || missing+=(redis-tools)
    # Debian puts it in /usr/sbin, which is not on every user's PATH
    command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || missing+=(nats-server)
    [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || command -v rabbitmq-server >/dev/null 2>&1 \
        || missing+=(rabbitmq-server)
    command -v mvn >/dev/null 2>&1 || missing+=(maven)
    # builds the newer nats-server (2.10: fsync on every write) the NATS durability test runs
    command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ] || missing+=(golang-go)
    command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    if ! command -v docker-compose >/dev/null 2>&1 && ! docker compose version >/dev/null 2>&1; then
        missing+=(docker-compose)
    fi
    command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
    command -v openssl >/dev/null 2>&1 || missing+=(openssl)  # certificates of the TLS tests
fi

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "$purpose: ${missing[*]} — install them (Debian/Ubuntu: sudo apt-get install ${missing[*]})" >&2
    exit 1
fi
echo "installing ${missing[*]} from Debian's archive"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# the package may start a system-wide redis on 6379; streambench starts its own on free ports
if [[ " ${missing[*]} " == *" redis-server "* ]] && command -v service >/dev/null 2>&1; then
    service redis-server stop >/dev/null 2>&1 || true
fi
# the package may start a system-wide RabbitMQ (and its epmd) on 5672/4369; streambench starts
# its own node, with an epmd of its own, on free loopback ports
if [[ " ${missing[*]} " == *" rabbitmq-server "* ]]; then
    if [ -d /run/systemd/system ]; then
        systemctl disable --now rabbitmq-server.service epmd.socket epmd.service >/dev/null 2>&1 || true
    elif pgrep -u rabbitmq -x beam.smp >/dev/null 2>&1 && command -v service >/dev/null 2>&1; then
        service rabbitmq-server stop >/dev/null 2>&1 || true
    fi
fi
