#!/usr/bin/env bash
# The soak run (benches/soak/README.md): builds the release binary, installs the driver's
# Python into the repository's .venv, and runs benches/soak/soak.py with the arguments
# given (default: 30 minutes on a local warehouse; `--warehouse s3 --duration 10m` for
# moto's S3). SKADE_BIN picks another binary (then nothing is built).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install --quiet --disable-pip-version-check -r benches/soak/requirements.txt
if [ -z "${SKADE_BIN:-}" ]; then
    cargo build --release --locked --bin skade
    target_dir="$(cargo metadata --format-version 1 --no-deps --locked |
        .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
    SKADE_BIN="$target_dir/release/skade"
fi
exec .venv/bin/python benches/soak/soak.py --skade-bin "$SKADE_BIN" "$@"
