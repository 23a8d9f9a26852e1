# Shell functions shared by the bench scripts (sourced, not run).

# Every load generator connects from loopback, one address opening up to 100k connections (S8):
# the Rowgate servers the scripts start take them without limits.max_connections_per_address.
export ROWGATE_LIMITS_MAX_CONNECTIONS_PER_ADDRESS=0

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Waits until URL answers (30 s at most).
wait_http() {
    for _ in $(seq 300); do
        curl -s -o /dev/null --max-time 1 "$1" && return 0
        sleep 0.1
    done
    echo "bench: no answer from $1" >&2
    return 1
}

json_field() { python3 -c "import json, sys; print(json.load(sys.stdin)['$1'])"; }

# start_postgres DIR: a throwaway PostgreSQL cluster in DIR/pg from the installed server
# binaries, with a database `bench`. Sets pg_bin, pg_pid, pg_port and pg_url; stop it with
# stop_postgres DIR. Returns 1 when no server binaries are installed.
start_postgres() {
    local dir="$1" as_pg=()
    pg_bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort | tail -n 1)"
    [ -n "$pg_bin" ] && [ -x "$pg_bin/initdb" ] || return 1
    if [ "$(id -u)" = 0 ]; then as_pg=(runuser -u postgres --); fi
    mkdir -p "$dir/pg"
    if [ "$(id -u)" = 0 ]; then chmod 755 "$dir"; chown postgres:postgres "$dir/pg"; fi
    "${as_pg[@]}" "$pg_bin/initdb" -D "$dir/pg/data" -U postgres --auth=trust -E UTF8 --locale=C >/dev/null
    pg_port="$(free_port)"
    "${as_pg[@]}" "$pg_bin/postgres" -D "$dir/pg/data" -p "$pg_port" -k "$dir/pg" \
        -c listen_addresses=127.0.0.1 -c shared_buffers=256MB >"$dir/pg/log" 2>&1 &
    pg_pid=$!
    for _ in $(seq 100); do "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" && break; sleep 0.1; done
    "$pg_bin/psql" -q -h 127.0.0.1 -p "$pg_port" -U postgres -c "CREATE DATABASE bench"
    pg_url="postgres://postgres@127.0.0.1:$pg_port/bench"
}

# stop_postgres DIR: a fast shutdown of the cluster start_postgres made there.
stop_postgres() {
    if [ -n "${pg_pid:-}" ] && [ -f "$1/pg/data/postmaster.pid" ]; then
        kill -INT "$(head -n 1 "$1/pg/data/postmaster.pid")" 2>/dev/null || true
        wait "$pg_pid" 2>/dev/null || true
    fi
}

# start_citus DIR: a Citus cluster in DIR/citus (a coordinator and two workers, each a server of
# the installed binaries with the extension preloaded, a database `bench` with it on every node,
# the coordinator in the metadata and the workers added). Needs start_postgres's pg_bin. Sets
# citus_ports (coordinator first) and citus_url; stop it with stop_citus DIR. Returns 1 when
# Citus is not installed (as root: ../shared/tools/build-citus.sh).
start_citus() {
    local dir="$1" as_pg=() name node port
    ls /usr/lib/postgresql/*/lib/citus.so >/dev/null 2>&1 || return 1
    if [ "$(id -u)" = 0 ]; then as_pg=(runuser -u postgres --); fi
    mkdir -p "$dir/citus"
    if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$dir/citus"; fi
    citus_ports=()
    for name in coordinator worker1 worker2; do
        node="$dir/citus/$name"
        "${as_pg[@]}" "$pg_bin/initdb" -D "$node" -U postgres --auth=trust -E UTF8 --locale=C >/dev/null
        port="$(free_port)"
        "${as_pg[@]}" "$pg_bin/postgres" -D "$node" -p "$port" -k "$node" -c listen_addresses=127.0.0.1 \
            -c shared_preload_libraries=citus -c shared_buffers=256MB -c max_connections=300 \
            -c max_prepared_transactions=300 >"$node.log" 2>&1 &
        for _ in $(seq 100); do "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$port" && break; sleep 0.1; done
        "$pg_bin/psql" -q -h 127.0.0.1 -p "$port" -U postgres -c "CREATE DATABASE bench"
        "$pg_bin/psql" -q -h 127.0.0.1 -p "$port" -U postgres -d bench -c "CREATE EXTENSION citus"
        citus_ports+=("$port")
    done
    "$pg_bin/psql" -q -h 127.0.0.1 -p "${citus_ports[0]}" -U postgres -d bench -v ON_ERROR_STOP=1 \
        -c "SELECT citus_set_coordinator_host('127.0.0.1', ${citus_ports[0]})" \
        -c "SELECT citus_add_node('127.0.0.1', ${citus_ports[1]})" \
        -c "SELECT citus_add_node('127.0.0.1', ${citus_ports[2]})" >/dev/null
    citus_url="postgres://postgres@127.0.0.1:${citus_ports[0]}/bench"
}

# citus_demo_layout: distributes the demo (made by `rowgate demo init` on citus_url) as
# docs/deployment.md's Citus section does: its first SQL block there, the one tests/citus.rs runs.
citus_demo_layout() {
    python3 - docs/deployment.md <<'PY' | "$pg_bin/psql" -q -h 127.0.0.1 -p "${citus_ports[0]}" -U postgres -d bench -v ON_ERROR_STOP=1 >/dev/null 2>&1
import sys
doc = open(sys.argv[1]).read()
section = doc[doc.index("### Distributing tables"):]
section = section[:section.index("\n### ", 4)]
print(section.split("```sql\n")[1].split("```")[0])
PY
}

# stop_citus DIR: a fast shutdown of the cluster start_citus made there.
stop_citus() {
    local node
    for node in "$1"/citus/*/; do
        [ -f "$node/postmaster.pid" ] && kill -INT "$(head -n 1 "$node/postmaster.pid")" 2>/dev/null || true
    done
}
