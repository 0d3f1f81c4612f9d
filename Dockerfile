# syntax=docker/dockerfile:1
# Build stage: the same `make build` as on a workstation (static binary,
# CGO_ENABLED=0, -trimpath), so there is one source of truth for the build.
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN make build

# Runtime: distroless static, non-root, CA certificates included. The only
# writable path is the clone directory (mount a volume or an emptyDir there).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/bin/tenant-worker /usr/local/bin/tenant-worker
ENV GIT_CLONE_DIR=/var/lib/tenant-worker/clone \
    HTTP_ADDR=:8080
VOLUME ["/var/lib/tenant-worker"]
EXPOSE 8080
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/tenant-worker"]
CMD ["run"]
