#!/usr/bin/env bash
# Makes `prometheus` and `promtool` available (the rule tests in tests/ops/lint.sh and the
# scrape test in tests/interop/test_operations.py need them): nothing to do when both
# are on PATH, else Debian's `prometheus` package (needs root, as CI runs). Debian's
# package also enables a `prometheus` service on :9090; in a container nothing starts it,
# and the tests never use that port (their Prometheus listens on a free loopback port).
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "prometheus/promtool missing: install Debian's 'prometheus' package (apt-get install prometheus)" >&2
    exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
command -v prometheus >/dev/null && command -v promtool >/dev/null
