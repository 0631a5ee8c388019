#!/usr/bin/env bash
# Installs the system packages streambench's local runtime and reports need, when missing:
# redis-server (Redis Streams broker), a Java runtime (Kafka, Pulsar, Spark), Maven (assembles
# the Kafka and Pulsar jars); for the docker runtime and its
# tests a Docker engine and compose (docker.io, docker-compose) and debootstrap (the tests build
# their images offline from Debian's archive). As root it installs them from Debian's archive;
# otherwise it says what to install and fails.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-benchmark >/dev/null 2>&1 || missing+=(redis-tools)
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
# Kafka and Pulsar for the local runtime are assembled from Maven Central jars on first use
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
if ! command -v docker-compose >/dev/null 2>&1 && ! docker compose version >/dev/null 2>&1; then
    missing+=(docker-compose)
fi
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "streambench needs: ${missing[*]} — install them (Debian/Ubuntu: sudo apt-get install ${missing[*]})" >&2
    exit 1
fi
echo "installing ${missing[*]} from Debian's archive"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# the package may start a system-wide redis on 6379; streambench starts its own on free ports
if command -v service >/dev/null 2>&1; then service redis-server stop >/dev/null 2>&1 || true; fi
