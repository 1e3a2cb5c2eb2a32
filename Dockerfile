# A static binary on an empty image, run as a numeric non-root user.
#   docker build -t sidecar-injector .
FROM rust:1.95-alpine AS build
RUN apk add --no-cache musl-dev
WORKDIR /src
COPY . .
# musl targets link statically; the empty config/ is the default config directory.
RUN cargo build --release --locked --bin sidecar-injector \
 && mkdir -p /out/config \
 && cp target/release/sidecar-injector /out/sidecar-injector

FROM scratch
COPY --from=build /out/ /
USER 65532:65532
EXPOSE 9443 9000
ENTRYPOINT ["/sidecar-injector"]
CMD ["serve"]
