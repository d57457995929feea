# Builds a static bar-controller and ships it alone in a distroless image
# that runs as a non-root user and has no shell.
#   docker build --build-arg VERSION=$(git describe --always --dirty) \
#     --build-arg COMMIT=$(git rev-parse HEAD) -t bar-controller .
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Dependencies first, so code edits do not invalidate the module cache layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/barcontroller/bar-controller/internal/version.version=${VERSION} -X github.com/barcontroller/bar-controller/internal/version.commit=${COMMIT}" \
      -o /out/bar-controller .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bar-controller /bar-controller
# 65532 is distroless's "nonroot"; numeric so runAsNonRoot can verify it.
USER 65532:65532
ENTRYPOINT ["/bar-controller"]
