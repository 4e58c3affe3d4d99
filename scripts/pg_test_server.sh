#!/usr/bin/env bash
# Start a throwaway PostgreSQL server on 127.0.0.1 for the task-store tests, installing
# PostgreSQL from the system packages if it is absent.
#   scripts/pg_test_server.sh start DIR PORT   -> prints the SQLAlchemy URL
#   scripts/pg_test_server.sh stop DIR
set -euo pipefail
cmd=${1:?start|stop}; dir=${2:?data directory}

find_bin() {
    local b
    b=$(command -v "$1" 2>/dev/null || true)
    if [ -z "$b" ]; then
        b=$(ls /usr/lib/postgresql/*/bin/"$1" 2>/dev/null | sort -V | tail -1 || true)
    fi
    echo "$b"
}

as_pg() {  # initdb and the server refuse to run as root
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$cmd" in
start)
    port=${3:?port}
    if [ -z "$(find_bin initdb)" ]; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >&2
        else
            echo "PostgreSQL is not installed and cannot be installed here (needs root and apt-get)" >&2
            exit 3
        fi
    fi
    initdb=$(find_bin initdb); pg_ctl=$(find_bin pg_ctl)
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; chmod 700 "$dir"; fi
    as_pg "$initdb" -D "$dir/data" -A trust -U postgres >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 4; }
    as_pg "$pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off" start >&2 \
        || { cat "$dir/server.log" >&2; exit 5; }
    echo "postgresql+psycopg://postgres@127.0.0.1:$port/postgres"
    ;;
stop)
    pg_ctl=$(find_bin pg_ctl)
    as_pg "$pg_ctl" -D "$dir/data" -m immediate stop >&2 || true
    ;;
*)
    echo "usage: $0 start DIR PORT | stop DIR" >&2; exit 2 ;;
esac
