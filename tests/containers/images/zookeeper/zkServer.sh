#!/bin/bash
# `zkServer.sh start-foreground`: the server in the foreground with the generated zoo.cfg.
exec java ${JVMFLAGS:--Xmx512M} -Dlog4j.configuration=file:/etc/kafka/docker/log4j.properties \
    -cp '/opt/kafka/libs/*' org.apache.zookeeper.server.quorum.QuorumPeerMain "$ZOO_CONF_DIR/zoo.cfg"
