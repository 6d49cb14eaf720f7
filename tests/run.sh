#!/usr/bin/env bash
# Runs every test: the Dockerfile and deploy/ linters, the Rust unit and integration
# tests, the crash test (short form), then the Python interop suite (pyarrow.flight
# client, pyiceberg reader, ADBC) against the real `skade` binary. Creates the Python
# venv at .venv on first use.
set -euo pipefail
cd "$(dirname "$0")/.."

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install --quiet --disable-pip-version-check -r tests/interop/requirements.txt \
    -r tests/ops/requirements.txt

tests/ops/lint.sh

cargo build --locked
cargo test --locked
# The crash test (tests/crash/) in its short form: 3 SIGKILLs of the real binary.
SKADE_CRASH_KILLS=3 SKADE_PYTHON="$PWD/.venv/bin/python" \
    cargo test --locked --test crash -- --ignored --nocapture
SKADE_BIN="$PWD/target/debug/skade" .venv/bin/pytest tests/interop -q
