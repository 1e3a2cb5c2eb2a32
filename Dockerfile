# The injector image: a static binary on an empty image, run as a numeric non-root user.
#   docker build --build-arg SIDECAR_INJECTOR_COMMIT=$(git rev-parse --short=12 HEAD) \
#     --build-arg VERSION=0.2.0 --build-arg REVISION=$(git rev-parse HEAD) -t sidecar-injector .
# scripts/image builds the same image without Docker or a registry (buildah, the binary built on
# the host): it takes the last stage of this file as it is, with the binary in place of the
# build stage's /out.
FROM rust:1.95-bookworm AS build
WORKDIR /src
# .git stays out of the context: the commit `--version` reports comes in as an argument.
ARG SIDECAR_INJECTOR_COMMIT=unknown
ENV SIDECAR_INJECTOR_COMMIT=$SIDECAR_INJECTOR_COMMIT
COPY . .
# The binary scripts/image ships: glibc linked statically (nothing to load at run time on an
# empty image), built with the `image` profile (fat LTO) by `cargo auditable`, which embeds its
# crates and their versions for scanners (trivy, grype, `cargo audit bin`).
RUN BIN=$(bash scripts/static-binary) \
 && mkdir -p /out/config /out/conf /out/bin \
 && cp "$BIN" /out/sidecar-injector \
 && ln -s /sidecar-injector /out/bin/entrypoint.sh

FROM scratch
# The OCI annotations registries and scanners show: scripts/release sets the version and the
# commit.
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="sidecar-injector" \
      org.opencontainers.image.description="Injects the sidecars a pod's annotation asks for and restarts the workloads running a stale one" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION" \
      org.opencontainers.image.source="https://github.com/sidecar-injector/sidecar-injector" \
      org.opencontainers.image.licenses="Apache-2.0"
# The empty config/ is the default config directory. For a Tumblr Deployment whose image is
# swapped: bin/entrypoint.sh (its `command`) runs the binary as Tumblr's entrypoint script did,
# and conf/ stands for Tumblr's CONFIG_DIR (conf/ or /conf).
COPY --from=build /out/ /
USER 65532:65532
EXPOSE 9443 9000
ENTRYPOINT ["/sidecar-injector"]
CMD ["serve"]
