#!/usr/bin/env bash
# Lints what operators run: the Dockerfile with hadolint, the Kubernetes manifests in
# deploy/ and deploy/shared/ (with its Secrets example) with kubernetes-validate (strict:
# an unknown field fails) against the oldest and the newest Kubernetes minor versions
# maintained upstream, the Prometheus rules with
# `promtool check rules` and their unit tests with `promtool test rules`
# (tests/ops/install-prometheus.sh), the Grafana dashboard as JSON, and the layering of src/
# (tests/ops/imports.py: no import cycle between files or between rooms), and the doc
# comments' links (rustdoc: every intra-doc link resolves). hadolint and
# kubernetes-validate come from PyPI
# (tests/ops/requirements.txt) into .venv; no Docker engine or cluster is needed.
set -euo pipefail
cd "$(dirname "$0")/../.."

.venv/bin/hadolint --failure-threshold info Dockerfile
echo "hadolint: Dockerfile ok"
for version in 1.35 1.37; do
    .venv/bin/kubernetes-validate --strict --quiet -k "$version" deploy/*.yaml \
        deploy/shared/*.yaml deploy/shared/secrets.yaml.example
    echo "kubernetes-validate: deploy/ and deploy/shared/ ok against Kubernetes $version"
done
promtool check rules deploy/prometheus/skade-rules.yaml
promtool test rules deploy/prometheus/skade-rules.test.yaml
echo "promtool: deploy/prometheus rules ok and their unit tests pass"
.venv/bin/python -m json.tool deploy/grafana/skade-dashboard.json >/dev/null
echo "deploy/grafana/skade-dashboard.json is JSON"
python3 tests/ops/imports.py src
RUSTDOCFLAGS="-D warnings -A rustdoc::private_intra_doc_links" \
    cargo doc --locked --quiet --no-deps --document-private-items
echo "rustdoc: every intra-doc link resolves"
