#!/usr/bin/env bash
# Stops every peer started by bench/peers/start.sh in WORKDIR: for each WORKDIR/*.pid it sends
# SIGTERM to that pid, waits up to 10 s (then SIGKILL), and removes the pid file.
#
#   bench/peers/stop.sh WORKDIR
#
# Prints one line per peer: `<peer>: stopped <pid>` or `<peer>: not running <pid>`.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 WORKDIR" >&2; exit 1; }
WORKDIR="$1"
[ -d "$WORKDIR" ] || { echo "stop.sh: no such directory: $WORKDIR" >&2; exit 1; }

shopt -s nullglob
for pidfile in "$WORKDIR"/*.pid; do
    peer="$(basename "$pidfile" .pid)"
    pid="$(cat "$pidfile")"
    case "$pid" in ''|*[!0-9]*) echo "$peer: bad pid file $pidfile" >&2; rm -f "$pidfile"; continue ;; esac
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
        echo "$peer: stopped $pid"
    else
        echo "$peer: not running $pid"
    fi
    rm -f "$pidfile"
done
