# The image deploy/ runs (the agent DaemonSet and the arbiter): `make image`, or
# docker build --build-arg VERSION=$(git describe --tags --always) -t REGISTRY/tidal:TAG .
#
# The binary uses cgo (NVML is loaded with dlopen), so it needs glibc: it is built on the same
# Debian release as the image it runs in. The image carries no NVML; on GPU nodes the NVIDIA
# container runtime mounts the driver's library (docs/gpu.md). Its ldconfig lets that
# runtime register the library.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=1 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/tidal ./cmd/tidal

FROM debian:bookworm-slim
COPY --from=build /out/tidal /usr/local/bin/tidal
# The agent runs as root (it writes cgroups); the arbiter's Deployment sets a non-root user.
ENTRYPOINT ["/usr/local/bin/tidal"]
