#!/usr/bin/env bash
# Lints what operators run: the Dockerfile with hadolint, and the Kubernetes manifests in
# deploy/ with kubernetes-validate (strict: an unknown field fails) against the oldest and
# the newest Kubernetes minor versions maintained upstream. Both tools come from PyPI
# (tests/ops/requirements.txt) into .venv; no Docker engine or cluster is needed.
set -euo pipefail
cd "$(dirname "$0")/../.."

.venv/bin/hadolint --failure-threshold info Dockerfile
echo "hadolint: Dockerfile ok"
for version in 1.35 1.37; do
    .venv/bin/kubernetes-validate --strict --quiet -k "$version" deploy/*.yaml
    echo "kubernetes-validate: deploy/ ok against Kubernetes $version"
done
