#!/bin/sh
# The public image's entry point for the standalone: the role is the first argument; the
# standalone's defaults are appended to JAVA_OPTS as -D options (HOST_IP as the segment store's
# published address, its listener on every interface, ZooKeeper 2181, controller 9090, segment
# store 12345), after whatever JAVA_OPTS already holds, so they win over JAVA_OPTS. The start
# script reads PRAVEGA_STANDALONE_OPTS after JAVA_OPTS: a -D option there wins over both.
set -e

append() {  # append -D$1=$2 to JAVA_OPTS when $2 is not empty
    if [ -n "$2" ]; then
        JAVA_OPTS="${JAVA_OPTS} -D$1=$2"
    fi
}

case "$1" in
standalone)
    append pravegaservice.service.published.host.nameOrIp "${HOST_IP}"
    append pravegaservice.service.listener.host.nameOrIp 0.0.0.0
    append singlenode.zk.port 2181
    append singlenode.controller.rpc.port 9090
    append singlenode.segmentStore.port 12345
    export JAVA_OPTS
    echo "JAVA_OPTS=${JAVA_OPTS}"
    exec /opt/pravega/bin/pravega-standalone
    ;;
*)
    echo "usage: $0 standalone (this test image has no controller or segmentstore role)" >&2
    exit 1
    ;;
esac
