#!/usr/bin/env bash
# Makes PostgreSQL's server programs (`initdb`, `pg_ctl`, `postgres`) and `psql` available
# for the shared-catalog tests (tests/pg/cluster.sh starts a private cluster from them):
# nothing to do when they are on PATH or in /usr/lib/postgresql/*/bin (Debian keeps the
# server programs there, off PATH), else Debian's `postgresql` package (needs root, as CI
# runs). Debian's package also creates a `main` cluster on port 5432 and may start it; the
# tests never use it (their clusters listen on a free loopback port, see cluster.sh).
set -euo pipefail

# Whether `initdb` and `pg_ctl` are on PATH or in one /usr/lib/postgresql/*/bin.
server_found() {
    if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
        return 0
    fi
    local bin
    for bin in /usr/lib/postgresql/*/bin; do
        [ -x "$bin/initdb" ] && [ -x "$bin/pg_ctl" ] && return 0
    done
    return 1
}

if server_found && command -v psql >/dev/null; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "PostgreSQL missing (initdb/pg_ctl/psql): install Debian's 'postgresql' package (apt-get install postgresql)" >&2
    exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
server_found && command -v psql >/dev/null
