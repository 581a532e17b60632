#!/usr/bin/env bash
# Stops the PgBouncer instances that `start.sh DIR` started in DIR.
set -euo pipefail

dir=${1:?usage: stop.sh DIR}
for mode in transaction session statement; do
  pidfile="$dir/$mode.pid"
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
  fi
  rm -f "$pidfile"
done
