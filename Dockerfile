# syntax=docker/dockerfile:1
#
# dendro-receiver in a container:
#
#   docker build -t dendro-receiver .
#   docker run -d --name dendro -p 127.0.0.1:9201:9201 -v dendro-data:/data dendro-receiver
#
# The archive is one file, /data/dendro.db, on the /data volume. Stop the
# container with `docker stop` (SIGTERM, then SIGKILL after --time seconds,
# default 10): give it `--stop-timeout 60` (or `docker stop -t 60`) so the
# final checkpoint always finishes and the volume holds a single file.

# ---- build: a static binary (modernc.org/sqlite is pure Go, no cgo) ----
FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first, so source edits do not re-download modules.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# CI runs this exact command (outside Docker) to prove the stage works.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/dendro-receiver ./cmd/dendro-receiver
# The data directory, owned by the distroless nonroot user (65532), so the
# named volume created from it is writable without running as root.
RUN mkdir -p /out/data && chown 65532:65532 /out/data

# ---- run: no shell, no package manager, non-root ----
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/dendro-receiver /dendro-receiver
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
VOLUME /data
EXPOSE 9201
# Distroless has no shell, curl or wget, so the health check runs the binary
# itself: `dendro-receiver healthcheck` GETs the URL and exits 0 on a 200
# (/-/ready answers 200 once writes are accepted), non-zero otherwise.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/dendro-receiver", "healthcheck", "--url=http://127.0.0.1:9201/-/ready"]
ENTRYPOINT ["/dendro-receiver"]
# The default listen address is 127.0.0.1:9201, which inside a container is
# the container's own loopback: unreachable through `docker run -p`. Listen
# on every interface of the container's network namespace instead, and
# choose exposure on the host with -p (e.g. -p 127.0.0.1:9201:9201).
# Arguments after the image name in `docker run` replace this whole list.
CMD ["--web.listen-address=0.0.0.0:9201", "--archive.path=/data/dendro.db"]
