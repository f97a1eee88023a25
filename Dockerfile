# syntax=docker/dockerfile:1
# jetpool — container image. Build from the repository root:
#   docker build -t jetpool:dev .
# The image runs `jetpool worker` by default; any other command works too:
#   docker run --rm jetpool:dev validate /work/workflow.yaml

# ---- build --------------------------------------------------------------------
# Keep the Go minor in step with go.mod's `go` line.
FROM golang:1.26-alpine AS build
WORKDIR /src

# Module downloads are cached in their own layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download

COPY . .
# `jetpool version` reports these (docker build --build-arg VERSION=v1.2.3
# --build-arg COMMIT=$(git rev-parse HEAD)); unset, what Go stamps (needs git).
ARG VERSION=dev
ARG COMMIT=
# Static binary: no cgo, no libc, runs on distroless/static (or scratch).
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=linux go build -trimpath \
      -ldflags="-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/jetpool ./cmd/jetpool

# ---- run ----------------------------------------------------------------------
# distroless/static: CA certificates (HTTPS to model providers), tzdata, /etc/passwd
# with the `nonroot` user (uid 65532), no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/jetpool /jetpool
USER nonroot:nonroot
# The embedded server's data dir when JETPOOL_NATS_URL is unset (`jetpool run|server`).
ENV JETPOOL_DATA_DIR=/home/nonroot/.jetpool
# Metrics, /healthz and /readyz when JETPOOL_METRICS_ADDR=:9090.
EXPOSE 9090
ENTRYPOINT ["/jetpool"]
CMD ["worker"]
