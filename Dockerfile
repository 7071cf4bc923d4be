# syntax=docker/dockerfile:1
# memra's image (make image): the binary, built without cgo, on a minimal glibc base.
#
# The binary has no cgo, but purego opens the CUDA driver (libcuda.so.1) through the dynamic
# loader, so the base needs glibc; distroless "cc" adds libstdc++ for a cuBLASLt or NVRTC
# mounted in later. The image holds no CUDA library: the NVIDIA container toolkit (or the GPU
# operator's device plugin) mounts the driver at run time, and kernels come from NVRTC where
# one is mounted, or from a compiled artifact (memra compile; serve --compiled DIR) with none.
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w -X main.version=${VERSION}" \
    -o /out/memra ./cmd/memra

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/memra /usr/local/bin/memra
# NVIDIA_*: what the container toolkit mounts; LD_LIBRARY_PATH: where drivers land when no
# ldconfig runs in the image (GKE's /usr/local/nvidia/lib64, the toolkit's multiarch folder).
# HF_HOME and XDG_CACHE_HOME: the model cache and the cubin cache on the /cache volume.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/lib/x86_64-linux-gnu \
    HF_HOME=/cache/huggingface \
    XDG_CACHE_HOME=/cache \
    HOME=/tmp
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/memra"]
CMD ["serve", "--host", "0.0.0.0", "--metrics-port", "9090"]
