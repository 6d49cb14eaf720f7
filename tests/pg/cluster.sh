#!/usr/bin/env bash
# A private PostgreSQL cluster for one test run, in a directory of its own.
#
#   cluster.sh start DIR            initdb in DIR/data (first time only), start the server
#                                   on 127.0.0.1 on a free port, create the database
#                                   `skade`, print its URL on stdout:
#                                   postgres://postgres@127.0.0.1:PORT/skade
#   cluster.sh stop DIR [MODE]      pg_ctl stop -m MODE (fast, the default, or immediate:
#                                   a crash, the next start runs crash recovery); nothing
#                                   to do when the server is not running
#   cluster.sh restart DIR          stop (fast) if running, then start on the same port and
#                                   the same data; prints the URL
#   cluster.sh url DIR              the URL of the `skade` database
#   cluster.sh psql DIR ARGS...     psql on the `skade` database (add `-d NAME` for another)
#   cluster.sh tls DIR CERT KEY     serve TLS with the PEM certificate CERT and its key KEY,
#                                   and refuse connections over 127.0.0.1 without TLS (the
#                                   Unix socket stays as it was); returns once both apply
#
# The cluster: superuser `postgres`, trust authentication (host 127.0.0.1/32 and local
# socket), listen_addresses 127.0.0.1 only, the Unix socket in DIR (when its path fits
# in a sockaddr_un; else none), fsync on, server log in DIR/postgres.log, the port in
# DIR/port. initdb runs with --no-sync (its files are fsynced by no one: a test that kills
# the server keeps them in the page cache; only a power cut would lose them).
#
# As root (CI), the server programs run as the OS user `postgres` (PostgreSQL refuses to
# run as root): DIR is chowned to it, so every parent of DIR must be searchable by it
# (a directory made directly in /tmp is, e.g. by `mktemp -d`; one in pytest's 0700
# /tmp/pytest-of-root is not). As any other user,
# they run as that user.
#
# With PG_CLUSTER_OWNER=PID in the environment, `start` also leaves a watcher that stops
# the cluster (fast, then immediate) once process PID is gone, so a test process that is
# killed leaves no server behind; and that stops the server (SIGQUIT) when DIR is deleted
# under it.
#
# PostgreSQL comes from tests/pg/install-postgres.sh (initdb/pg_ctl on PATH or in
# /usr/lib/postgresql/*/bin, newest version first).
set -euo pipefail

DATABASE=skade
SUPERUSER=postgres
START_TIMEOUT_S=30
# Each try picks a new free port; another process can take it between picking and binding.
START_TRIES=5
# sockaddr_un.sun_path is 108 bytes on Linux, including the final NUL.
MAX_SOCKET_PATH=107

usage() {
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

die() {
    echo "tests/pg/cluster.sh: $*" >&2
    exit 1
}

# The directory holding initdb and pg_ctl: PATH first, then the newest
# /usr/lib/postgresql/*/bin.
find_bindir() {
    if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
        dirname "$(readlink -f "$(command -v pg_ctl)")"
        return
    fi
    local bin
    for bin in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4,4 -rn); do
        if [ -x "$bin/initdb" ] && [ -x "$bin/pg_ctl" ]; then
            echo "$bin"
            return
        fi
    done
    die "PostgreSQL not found (initdb/pg_ctl neither on PATH nor in /usr/lib/postgresql/*/bin): run tests/pg/install-postgres.sh"
}

# Runs "$@" as the user that owns the cluster: `postgres` when we are root, else us.
as_owner() {
    if [ "$(id -u)" = 0 ]; then
        (cd / && runuser -u "$SUPERUSER" -- "$@")
    else
        "$@"
    fi
}

psql_bin() {
    if command -v psql >/dev/null; then
        command -v psql
    elif [ -x "$BINDIR/psql" ]; then
        echo "$BINDIR/psql"
    else
        die "psql not found: run tests/pg/install-postgres.sh"
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

read_port() {
    [ -s "$DIR/port" ] || die "$DIR/port missing: no cluster was started in $DIR"
    cat "$DIR/port"
}

url() {
    local port
    port="$(read_port)"
    echo "postgres://$SUPERUSER@127.0.0.1:$port/$DATABASE"
}

running() {
    [ -d "$DIR/data" ] && as_owner "$BINDIR/pg_ctl" status -D "$DIR/data" >/dev/null 2>&1
}

run_psql() {
    local port psql
    port="$(read_port)"
    psql="$(psql_bin)"
    PGCONNECT_TIMEOUT=10 "$psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" \
        -U "$SUPERUSER" -d "$DATABASE" "$@"
}

init_cluster() {
    mkdir -p "$DIR"
    if [ "$(id -u)" = 0 ]; then
        id -u "$SUPERUSER" >/dev/null 2>&1 ||
            die "no OS user '$SUPERUSER' to run PostgreSQL as (Debian's postgresql package creates it): run tests/pg/install-postgres.sh"
        chown "$SUPERUSER:" "$DIR"
        as_owner test -w "$DIR" ||
            die "$DIR is not writable by the OS user '$SUPERUSER' (a parent directory is not searchable by it): make DIR directly under /tmp, e.g. DIR=\$(mktemp -d)"
    fi
    as_owner "$BINDIR/initdb" -D "$DIR/data" -U "$SUPERUSER" --auth-host=trust --auth-local=trust \
        --encoding=UTF8 --locale=C --no-sync >"$DIR/initdb.log" 2>&1 ||
        die "initdb failed; its output ($DIR/initdb.log):
$(cat "$DIR/initdb.log")"
    local socket_dir="$DIR"
    # "<dir>/.s.PGSQL.<port>" with a port of up to 5 digits.
    if [ $((${#DIR} + 17)) -gt $MAX_SOCKET_PATH ]; then
        socket_dir=""
    fi
    # The port goes in postgresql.auto.conf (start rewrites it); the rest is fixed.
    as_owner tee -a "$DIR/data/postgresql.conf" >/dev/null <<CONF

# tests/pg/cluster.sh
listen_addresses = '127.0.0.1'
unix_socket_directories = '$socket_dir'
fsync = on
synchronous_commit = on
full_page_writes = on
max_connections = 200
log_min_messages = warning
log_connections = off
CONF
}

# Starts the server on port $1; fails (server log on stderr) when it does not come up.
start_on_port() {
    local port="$1"
    echo "port = $port" | as_owner tee "$DIR/data/postgresql.auto.conf" >/dev/null
    echo "$port" >"$DIR/port.tmp"
    mv "$DIR/port.tmp" "$DIR/port"
    as_owner "$BINDIR/pg_ctl" start -D "$DIR/data" -l "$DIR/postgres.log" -w -t "$START_TIMEOUT_S" \
        >/dev/null 2>&1
}

create_database() {
    if [ -z "$(run_psql -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$DATABASE'")" ]; then
        run_psql -d postgres -c "CREATE DATABASE $DATABASE"
    fi
}

start_watcher() {
    local owner="${PG_CLUSTER_OWNER:-}"
    [ -n "$owner" ] || return 0
    [ -e "$DIR/watcher.pid" ] && kill -0 "$(cat "$DIR/watcher.pid")" 2>/dev/null && return 0
    # Detached, with no handle on our stdout (a caller reading it until EOF would hang).
    setsid bash -c '
        postmaster=""
        while kill -0 "$1" 2>/dev/null && [ -d "$2/data" ]; do
            [ -r "$2/data/postmaster.pid" ] && postmaster="$(head -n 1 "$2/data/postmaster.pid")"
            sleep 1
        done
        if [ -d "$2/data" ]; then
            "$0" stop "$2" fast || "$0" stop "$2" immediate
        elif [ -n "$postmaster" ] &&
            tr "\0" " " <"/proc/$postmaster/cmdline" 2>/dev/null | grep -qF -- "-D $2/data"; then
            # DIR was deleted under a running server: SIGQUIT is its immediate shutdown.
            kill -QUIT "$postmaster"
        fi
    ' "$(realpath "$0")" "$owner" "$DIR" </dev/null >>"$DIR/watcher.log" 2>&1 &
    echo $! >"$DIR/watcher.pid"
}

cmd_start() {
    if running; then
        url
        return
    fi
    [ -f "$DIR/data/PG_VERSION" ] || init_cluster
    local try
    for try in $(seq 1 $START_TRIES); do
        if start_on_port "$(free_port)"; then
            create_database
            start_watcher
            url
            return
        fi
        running && break
    done
    die "the server did not start in $DIR/data after $START_TRIES tries; log tail ($DIR/postgres.log):
$(tail -n 30 "$DIR/postgres.log" 2>/dev/null)"
}

cmd_stop() {
    local mode="${1:-fast}"
    case "$mode" in
    fast | immediate | smart) ;;
    *) die "stop mode must be fast or immediate, not '$mode'" ;;
    esac
    running || return 0
    as_owner "$BINDIR/pg_ctl" stop -D "$DIR/data" -m "$mode" -w -t "$START_TIMEOUT_S" >/dev/null
}

cmd_restart() {
    local port
    port="$(read_port)"
    cmd_stop fast
    start_on_port "$port" ||
        die "the server did not start again on port $port; log tail ($DIR/postgres.log):
$(tail -n 30 "$DIR/postgres.log" 2>/dev/null)"
    start_watcher
    url
}

cmd_tls() {
    local cert="$1" key="$2" try
    running || die "no server runs in $DIR/data: start it first"
    cp "$cert" "$DIR/data/server.crt"
    cp "$key" "$DIR/data/server.key"
    if [ "$(id -u)" = 0 ]; then
        chown "$SUPERUSER:" "$DIR/data/server.crt" "$DIR/data/server.key"
    fi
    # PostgreSQL refuses a key others can read.
    chmod 0600 "$DIR/data/server.crt" "$DIR/data/server.key"
    as_owner tee -a "$DIR/data/postgresql.conf" >/dev/null <<CONF
ssl = on
ssl_cert_file = 'server.crt'
ssl_key_file = 'server.key'
CONF
    # TCP only with TLS: the host lines become hostssl lines.
    as_owner sed -i 's/^host\([[:space:]]\)/hostssl\1/' "$DIR/data/pg_hba.conf"
    as_owner "$BINDIR/pg_ctl" reload -D "$DIR/data" >/dev/null
    # The reload is a signal: wait until a plaintext connection is refused.
    for try in $(seq 1 50); do
        if ! PGSSLMODE=disable run_psql -tAc "SELECT 1" >/dev/null 2>&1; then
            return
        fi
        sleep 0.2
    done
    die "the server still takes plaintext connections after the reload; log tail ($DIR/postgres.log):
$(tail -n 30 "$DIR/postgres.log" 2>/dev/null)"
}

[ $# -ge 2 ] || usage
command="$1"
DIR="$(realpath -m "$2")"
shift 2
BINDIR="$(find_bindir)"

case "$command" in
start) [ $# = 0 ] || usage; cmd_start ;;
stop) [ $# -le 1 ] || usage; cmd_stop "$@" ;;
restart) [ $# = 0 ] || usage; cmd_restart ;;
url) [ $# = 0 ] || usage; url ;;
psql) run_psql "$@" ;;
tls) [ $# = 2 ] || usage; cmd_tls "$@" ;;
*) usage ;;
esac
