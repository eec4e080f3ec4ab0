#!/usr/bin/env bash
# Start a throwaway MariaDB (Debian's 10.11, standing in for MySQL) on 127.0.0.1 (sourced, after env.sh). Sets
# SMARTSENSOR_TEST_MYSQL_URL (user and password smartsensor, all privileges, database smartsensor_test) and MYSQL_TMP; call stop_mysql to stop
# and delete it. Installs mariadb-server and the MariaDB JDBC driver (libmariadb-java) when missing. mariadbd
# refuses to run as root, so as root it runs as user `mysql`; its socket is in the data folder.
set -euo pipefail

MYSQL_JDBC_JAR=/usr/share/java/mariadb-java-client.jar

ensure_mysql() {
  if command -v mariadbd >/dev/null 2>&1 && command -v mariadb-install-db >/dev/null 2>&1 && [ -f "$MYSQL_JDBC_JAR" ]; then
    return 0
  fi
  log "MariaDB or its JDBC driver not found: installing mariadb-server and libmariadb-java"
  as_root apt-get install -y -qq mariadb-server libmariadb-java >/dev/null 2>&1 \
    || { as_root apt-get update -qq && as_root apt-get install -y -qq mariadb-server libmariadb-java >/dev/null; }
}

start_mysql() {
  local port run_as=() started installed i
  ensure_mysql
  started="$EPOCHREALTIME"
  if [ "$(id -u)" = 0 ]; then
    id mysql >/dev/null 2>&1 || useradd --system --no-create-home mysql
    run_as=(runuser -u mysql --)
  fi
  MYSQL_TMP="$(mktemp -d /tmp/smartsensor-mysql.XXXXXX)"
  chmod 755 "$MYSQL_TMP"
  [ "$(id -u)" = 0 ] && chown mysql "$MYSQL_TMP"
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  # Small InnoDB files, the same for mariadb-install-db and mariadbd (a different redo log size is rebuilt at start).
  local innodb=(--innodb-buffer-pool-size=64M --innodb-log-file-size=16M --innodb-doublewrite=0)
  # utf8mb4 throughout (partition values are unicode).
  local opts=(
    --no-defaults --datadir="$MYSQL_TMP/data" --socket="$MYSQL_TMP/data/mysqld.sock" --pid-file="$MYSQL_TMP/mysqld.pid"
    --bind-address=127.0.0.1 --port="$port" --skip-name-resolve --skip-log-bin --innodb-flush-log-at-trx-commit=0
    "${innodb[@]}" --max-connections=200 --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci
    --log-error="$MYSQL_TMP/server.log"
  )
  "${run_as[@]}" mariadb-install-db --no-defaults --datadir="$MYSQL_TMP/data" --auth-root-authentication-method=normal \
    --skip-test-db --skip-name-resolve "${innodb[@]}" >"$MYSQL_TMP/install.log" 2>&1 \
    || { cat "$MYSQL_TMP/install.log" >&2; return 1; }
  installed="$EPOCHREALTIME"
  "${run_as[@]}" mariadbd "${opts[@]}" >/dev/null 2>&1 &
  MYSQL_PID=$!
  for i in $(seq 1 150); do
    if mariadb --no-defaults -uroot --socket="$MYSQL_TMP/data/mysqld.sock" -e "CREATE DATABASE smartsensor_test" \
      >/dev/null 2>&1; then
      break
    fi
    if ! kill -0 "$MYSQL_PID" 2>/dev/null || [ "$i" = 150 ]; then
      cat "$MYSQL_TMP/server.log" >&2; log "MariaDB did not start"; return 1
    fi
    sleep 0.1
  done
  # mariadb-install-db makes root@localhost only (the socket); the tests connect over TCP to 127.0.0.1.
  mariadb --no-defaults -uroot --socket="$MYSQL_TMP/data/mysqld.sock" -e \
    "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'; GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION" >/dev/null
  # A password: Hive's metastore sends its default one ("mine") when given an empty one.
  mariadb --no-defaults -uroot --socket="$MYSQL_TMP/data/mysqld.sock" -e \
    "CREATE USER 'smartsensor'@'127.0.0.1' IDENTIFIED BY 'smartsensor'; \
     GRANT ALL ON *.* TO 'smartsensor'@'127.0.0.1' WITH GRANT OPTION" >/dev/null
  export SMARTSENSOR_TEST_MYSQL_URL="mysql://smartsensor:smartsensor@127.0.0.1:$port/smartsensor_test"
  log "MariaDB $(mariadbd --version | awk '{print $3}') on 127.0.0.1:$port (data $MYSQL_TMP), up in" \
    "$(awk -v a="$started" -v b="$installed" -v c="$EPOCHREALTIME" 'BEGIN { printf "%.1f s (install-db %.1f s)", c - a, b - a }')"
}

stop_mysql() {
  local pid
  if [ -n "${MYSQL_TMP:-}" ] && [ -f "$MYSQL_TMP/mysqld.pid" ]; then
    pid="$(cat "$MYSQL_TMP/mysqld.pid")"
    kill -KILL "$pid" 2>/dev/null || true  # throwaway data: no clean shutdown needed
  fi
  if [ -n "${MYSQL_PID:-}" ]; then
    kill "$MYSQL_PID" 2>/dev/null || true
    wait "$MYSQL_PID" 2>/dev/null || true
  fi
  if [ -n "${MYSQL_TMP:-}" ] && [ -d "$MYSQL_TMP" ]; then
    rm -rf "$MYSQL_TMP"
  fi
}
