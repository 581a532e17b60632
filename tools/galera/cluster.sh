#!/usr/bin/env bash
# A MariaDB Galera cluster of three nodes on spare ports, for the tests
# that prove the library on a multi-primary cluster (tests/galera).
#
#   tools/galera/cluster.sh start DIR   # data folders, sockets and logs in DIR
#   tools/galera/cluster.sh stop DIR    # stops only the nodes DIR started
#
# Node n (1, 2, 3) answers SQL on 127.0.0.1:(3406 + n), user root with no
# password, database `test`; Galera's group traffic uses 4566 + 10n, its
# incremental transfers 4567 + 10n and its state transfers (rsync) 4568 +
# 10n. Node 1 starts the cluster; the others join it by state transfer.
set -euo pipefail

command=${1:?usage: cluster.sh start|stop DIR}
dir=${2:?usage: cluster.sh start|stop DIR}
provider=/usr/lib/galera/libgalera_smm.so
members="gcomm://127.0.0.1:4576,127.0.0.1:4586,127.0.0.1:4596"

node_config() {
  local n=$1 data=$dir/node$1
  cat > "$data.cnf" <<CNF
[mariadbd]
datadir=$data/data
socket=$data/mysqld.sock
pid-file=$data/mysqld.pid
log-error=$data/error.log
port=$((3406 + n))
bind-address=127.0.0.1
skip-name-resolve
user=mysql
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
innodb_buffer_pool_size=64M
innodb_log_file_size=16M
wsrep_on=ON
wsrep_provider=$provider
wsrep_cluster_name=stateguard_test
wsrep_cluster_address=$members
wsrep_node_name=node$n
wsrep_node_address=127.0.0.1:$((4566 + 10 * n))
wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:$((4566 + 10 * n));ist.recv_addr=127.0.0.1:$((4567 + 10 * n));gcache.size=32M"
wsrep_sst_method=rsync
wsrep_sst_receive_address=127.0.0.1:$((4568 + 10 * n))
CNF
}

wait_synced() {
  local n=$1
  for _ in $(seq 1 120); do
    state=$(mariadb --protocol=tcp -h 127.0.0.1 -P $((3406 + n)) -u root -N -e \
      "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_LOCAL_STATE_COMMENT'" 2>/dev/null || true)
    if [ "$state" = "Synced" ]; then return 0; fi
    sleep 1
  done
  echo "node $n did not reach Synced; its log:" >&2
  tail -40 "$dir/node$n/error.log" >&2 || true
  return 1
}

case $command in
  start)
    for n in 1 2 3; do
      port=$((3406 + n))
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "something already listens on port $port" >&2
        exit 1
      fi
    done
    mkdir -p "$dir"
    for n in 1 2 3; do
      mkdir -p "$dir/node$n/data"
      node_config $n
    done
    # The nodes, and the rsync daemons their state transfers start, run
    # as the mysql user, who must own the folders.
    chown -R mysql:mysql "$dir"
    mariadb-install-db --defaults-file="$dir/node1.cnf" --user=mysql \
      --auth-root-authentication-method=normal --skip-test-db >"$dir/node1/install.log" 2>&1
    mariadbd --defaults-file="$dir/node1.cnf" --wsrep-new-cluster >/dev/null 2>&1 &
    wait_synced 1
    mariadb --protocol=tcp -h 127.0.0.1 -P 3407 -u root -e "CREATE DATABASE IF NOT EXISTS test"
    for n in 2 3; do
      mariadbd --defaults-file="$dir/node$n.cnf" >/dev/null 2>&1 &
      wait_synced $n
    done
    ;;
  stop)
    for n in 3 2 1; do
      pidfile=$dir/node$n/mysqld.pid
      if [ -f "$pidfile" ]; then
        kill "$(cat "$pidfile")" 2>/dev/null || true
      fi
    done
    for n in 3 2 1; do
      pidfile=$dir/node$n/mysqld.pid
      for _ in $(seq 1 60); do
        [ -f "$pidfile" ] || break
        sleep 0.5
      done
    done
    ;;
  *)
    echo "usage: cluster.sh start|stop DIR" >&2
    exit 2
    ;;
esac
