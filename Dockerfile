# syntax=docker/dockerfile:1
#
# skade's container image: a release build in the Rust image, run from a slim Debian of
# the same release as a non-root user (uid 10001).
#
#   docker build -t skade .
#   docker run --stop-timeout 40 -p 50051:50051 -p 9464:9464 -v skade-data:/var/lib/skade skade
#
# skade is PID 1 and handles SIGTERM itself: it stops accepting, lets open streams commit
# within --shutdown-timeout (30s) and exits 0, so give `docker stop` more than that.
# CI lints this file with hadolint (tests/ops/lint.sh); no Docker engine runs there.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
WORKDIR /src
COPY . .
# protoc comes vendored (protoc-bin-vendored); the C parts (zstd, lz4, ring) need only gcc.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin skade \
    && install -D -m 0755 target/release/skade /out/skade

FROM debian:${DEBIAN_RELEASE}-slim
RUN groupadd --system --gid 10001 skade \
    && useradd --system --uid 10001 --gid skade --home-dir /var/lib/skade \
        --no-create-home --shell /usr/sbin/nologin skade \
    && install -d -o skade -g skade -m 0750 /var/lib/skade
COPY --from=build /out/skade /usr/local/bin/skade

# Listen on every interface inside the container; data in the volume.
ENV SKADE_DATA_DIR=/var/lib/skade \
    SKADE_FLIGHT_ADDR=0.0.0.0:50051 \
    SKADE_METRICS_ADDR=0.0.0.0:9464
VOLUME ["/var/lib/skade"]
# 50051: Arrow Flight / Flight SQL and grpc.health.v1; 9464: /metrics, /healthz, /readyz, REST catalog
EXPOSE 50051 9464
USER 10001:10001
WORKDIR /var/lib/skade

# GET /healthz on the metrics port with bash's /dev/tcp (the image has no curl). It reads
# the port from SKADE_METRICS_ADDR: change the address there, not with --metrics-addr.
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD ["/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${SKADE_METRICS_ADDR##*:} && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]

STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/skade"]
CMD ["serve"]
