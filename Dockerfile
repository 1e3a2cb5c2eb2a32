# The injector image: a static binary on an empty image, run as a numeric non-root user.
#   docker build -t sidecar-injector .
# scripts/image builds the same image without Docker or a registry (buildah, the binary built on
# the host): it takes the last stage of this file as it is, with the binary in place of the
# build stage's /out.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# glibc, linked statically: nothing to load at run time on an empty image.
RUN RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --target x86_64-unknown-linux-gnu --bin sidecar-injector \
 && mkdir -p /out/config \
 && cp target/x86_64-unknown-linux-gnu/release/sidecar-injector /out/sidecar-injector

FROM scratch
# The empty config/ is the default config directory.
COPY --from=build /out/ /
USER 65532:65532
EXPOSE 9443 9000
ENTRYPOINT ["/sidecar-injector"]
CMD ["serve"]
