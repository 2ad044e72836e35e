# syntax=docker/dockerfile:1
# portmapper operator image: build in the official Rust image, run on distroless (glibc + CA
# certificates for https webhook checks, no shell, no package manager) as a fixed non-root UID.
#   make image                      # docker build -t ghcr.io/portmapper/portmapper:0.1.0 .
#   kind load docker-image ghcr.io/portmapper/portmapper:0.1.0
ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
# The whole workspace: Cargo needs every member's manifest to resolve the lockfile. Without the
# opt-in `demo` feature: the `demo` subcommand and its embedded API server stay out of the image.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p portmapper --bin portmapper \
 && install -D -m 0755 target/release/portmapper /out/portmapper

FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="portmapper" \
      org.opencontainers.image.description="Per-port EndpointSlices for selector-less Services" \
      org.opencontainers.image.source="https://github.com/portmapper/portmapper" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/portmapper /usr/local/bin/portmapper
# 65532 is distroless' nonroot user; the chart runs as the same UID with a read-only root.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/portmapper"]
CMD ["run"]
