#!/bin/bash
# zoo.cfg from ZOO_* variables and the server's myid, as the public zookeeper image does.
set -euo pipefail
if [ ! -f "$ZOO_CONF_DIR/zoo.cfg" ]; then
    {
        echo "dataDir=$ZOO_DATA_DIR"
        echo "dataLogDir=$ZOO_DATA_LOG_DIR"
        echo "tickTime=$ZOO_TICK_TIME"
        echo "initLimit=$ZOO_INIT_LIMIT"
        echo "syncLimit=$ZOO_SYNC_LIMIT"
        echo "maxClientCnxns=$ZOO_MAX_CLIENT_CNXNS"
        echo "standaloneEnabled=$ZOO_STANDALONE_ENABLED"
        echo "admin.enableServer=$ZOO_ADMINSERVER_ENABLED"
        for server in ${ZOO_SERVERS:-server.1=localhost:2888:3888;2181}; do
            echo "$server"
        done
        if [ -n "${ZOO_CFG_EXTRA:-}" ]; then
            for line in $ZOO_CFG_EXTRA; do echo "$line"; done
        fi
    } > "$ZOO_CONF_DIR/zoo.cfg"
fi
if [ ! -f "$ZOO_DATA_DIR/myid" ]; then
    echo "${ZOO_MY_ID:-1}" > "$ZOO_DATA_DIR/myid"
fi
exec "$@"
