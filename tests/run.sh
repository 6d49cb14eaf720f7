#!/usr/bin/env bash
# Runs every test: the Dockerfile, deploy/ and Prometheus-rule linters, the Rust unit and
# integration tests, the crash test (short form, local and on moto's S3 server), the
# power-cut test (short form and its negative control), then the
# Python interop suite (pyarrow Flight client, pyiceberg reader, ADBC, a real Prometheus
# server, moto's S3 server; and Spark, the Java and Go Flight clients, the JDBC and Go
# ADBC drivers and Iceberg Java's parsers, which it builds with Maven and Go from
# tests/java/pom.xml and examples/, their dependencies cached in ~/.m2 and Go's caches)
# against the real `skade` binary, and the soak harness's
# 2-minute form (benches/soak/). Creates the Python venv at
# .venv on first use, and installs Prometheus (Debian's `prometheus` package: `prometheus`
# and `promtool`) and PostgreSQL (Debian's `postgresql` package, for the private clusters
# of tests/pg/cluster.sh) when missing.
# Honours CARGO_TARGET_DIR: the binary under test is the one `cargo build` just made.
set -euo pipefail
cd "$(dirname "$0")/.."

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install --quiet --disable-pip-version-check -r tests/interop/requirements.txt \
    -r tests/ops/requirements.txt -r benches/soak/requirements.txt \
    -r tests/powercut/requirements.txt
tests/ops/install-prometheus.sh
tests/powercut/install-fuse.sh
tests/pg/install-postgres.sh

tests/ops/lint.sh

cargo build --locked
target_dir="$(cargo metadata --format-version 1 --no-deps --locked |
    .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
cargo test --locked
# The crash test (tests/crash/) in its short form: 3 SIGKILLs of the real binary; and its
# PostgreSQL mode (shared_catalog.rs): three instances on one PostgreSQL catalog (a private
# cluster, tests/pg/cluster.sh), 4 SIGKILLs and one immediate stop of the database.
SKADE_SHARED_KILLS=4 SKADE_CRASH_KILLS=3 SKADE_PYTHON="$PWD/.venv/bin/python" \
    cargo test --locked --test crash -- --ignored --nocapture
# ... and again with the warehouse on S3: moto's server (moto[server] from the venv) on a
# free loopback port; moto takes any credentials.
SKADE_CRASH_S3=1 SKADE_CRASH_KILLS=3 SKADE_PYTHON="$PWD/.venv/bin/python" \
    AWS_ACCESS_KEY_ID=skade-crash AWS_SECRET_ACCESS_KEY=skade-crash AWS_REGION=us-east-1 \
    cargo test --locked --test crash -- --ignored --nocapture --skip shared_catalog
# The power-cut test (tests/powercut/) in its short form: a FUSE disk that forgets what
# was never fsynced, ext4 on a loop device on it, 10 cuts across both crash-image
# policies, the disk's self-test, and the two negative controls (every sync a no-op;
# syncfs alone a no-op: each must lose acked rows). Needs root, /dev/fuse and loop
# devices: says so and skips where they are missing, fails in CI.
SKADE_POWERCUT_CUTS=10 SKADE_PYTHON="$PWD/.venv/bin/python" \
    cargo test --locked --test powercut -- --ignored --nocapture --test-threads 1
SKADE_BIN="$target_dir/debug/skade" .venv/bin/pytest tests/interop -q
# The soak harness (benches/soak/) in its 2-minute form on the debug binary: checks that
# every part of the load runs and is measured, not the soak's targets.
soak_out="$(mktemp -d)"
.venv/bin/python benches/soak/soak.py --skade-bin "$target_dir/debug/skade" --duration 2m \
    --check --out "$soak_out"
rm -rf "$soak_out"
