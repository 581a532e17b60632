#!/usr/bin/env bash
# Starts three PgBouncer instances of their own in front of the local
# PostgreSQL, for the tests of `stateguard::pooler`:
#
#   port 6442: pool_mode = transaction (the setup the pooler check refuses)
#   port 6443: pool_mode = session     (the setup it accepts)
#   port 6444: pool_mode = statement   (refused too: no transactions at all),
#              server_round_robin = 1
#
# Each also serves the database `single`: `test` on one server session.
#
#   tools/pgbouncer/start.sh DIR    config, logs and pid files go in DIR
#   tools/pgbouncer/stop.sh DIR     stops them again
#
# On success it prints the three URLs as shell assignments, for `eval`:
#
#   eval "$(tools/pgbouncer/start.sh "$(mktemp -d)")"
#
# sets STATEGUARD_PGBOUNCER_TRANSACTION_URL, STATEGUARD_PGBOUNCER_SESSION_URL
# and STATEGUARD_PGBOUNCER_STATEMENT_URL (the ports can be changed with
# PGBOUNCER_TRANSACTION_PORT, PGBOUNCER_SESSION_PORT, PGBOUNCER_STATEMENT_PORT). Not the system's pgbouncer service: its
# own processes, on spare ports (not 6432, where Debian's service listens),
# with `auth_type = trust` onto PostgreSQL at
# PGBOUNCER_UPSTREAM (default 127.0.0.1:5432), user postgres, database test.
# PgBouncer will not run as root; as root, the instances run as the
# `postgres` user (`-u postgres`), which must be able to write DIR.
set -euo pipefail

dir=${1:?usage: start.sh DIR}
upstream=${PGBOUNCER_UPSTREAM:-127.0.0.1:5432}
upstream_host=${upstream%:*}
upstream_port=${upstream##*:}
transaction_port=${PGBOUNCER_TRANSACTION_PORT:-6442}
session_port=${PGBOUNCER_SESSION_PORT:-6443}
statement_port=${PGBOUNCER_STATEMENT_PORT:-6444}
pool_size=${PGBOUNCER_POOL_SIZE:-10}
user=postgres
database=test

command -v pgbouncer >/dev/null 2>&1 || {
  echo "error: pgbouncer is not installed (apt-get install pgbouncer)" >&2
  exit 1
}
command -v psql >/dev/null 2>&1 || {
  echo "error: psql is needed to see PgBouncer answer" >&2
  exit 1
}

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
run_as=()
if [ "$(id -u)" = 0 ]; then
  run_as=(-u "$user")
  chown "$user" "$dir"
fi

# With trust, PgBouncer checks no password, but the user must be listed.
printf '"%s" ""\n' "$user" >"$dir/userlist.txt"

start() { # start MODE PORT ROUND_ROBIN
  local mode=$1 port=$2 round_robin=$3 ini="$dir/$1.ini"
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "error: something already listens on port $port; stop it or set PGBOUNCER_${mode^^}_PORT" >&2
    return 1
  fi
  cat >"$ini" <<INI
[databases]
; One server session: every client's statements meet on it.
single = host=$upstream_host port=$upstream_port dbname=$database pool_size=1
* = host=$upstream_host port=$upstream_port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = $mode
server_round_robin = $round_robin
default_pool_size = $pool_size
max_client_conn = 500
; sqlx sends extra_float_digits at start-up, which PgBouncer refuses
; unless it is told to ignore it.
ignore_startup_parameters = extra_float_digits
logfile = $dir/$mode.log
pidfile = $dir/$mode.pid
admin_users = $user
INI
  chown "$user" "$ini" "$dir/userlist.txt" 2>/dev/null || true
  pgbouncer -d "${run_as[@]}" "$ini"
  for _ in $(seq 30); do
    if psql -h 127.0.0.1 -p "$port" -U "$user" -d "$database" -tAc 'SELECT 1' >/dev/null 2>&1; then
      return 0
    fi
    sleep 1
  done
  echo "error: PgBouncer ($mode pooling) did not answer on port $port within 30s; see $dir/$mode.log" >&2
  tail -n 20 "$dir/$mode.log" >&2 || true
  return 1
}

# The statement-mode one hands server sessions out round robin, the others
# reuse the one released last (PgBouncer's default): the tests meet both.
start transaction "$transaction_port" 0
start session "$session_port" 0
start statement "$statement_port" 1

echo "STATEGUARD_PGBOUNCER_TRANSACTION_URL=postgres://$user@127.0.0.1:$transaction_port/$database"
echo "STATEGUARD_PGBOUNCER_SESSION_URL=postgres://$user@127.0.0.1:$session_port/$database"
echo "STATEGUARD_PGBOUNCER_STATEMENT_URL=postgres://$user@127.0.0.1:$statement_port/$database"
