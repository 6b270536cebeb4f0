# The repository's broker image: cmd/queentest (the in-memory Queen broker of
# package queentest) as a static binary in an empty image. No base image, no
# build stage: nothing here needs a registry. Build the binary first, then
# the image, from the repository root:
#
#	CGO_ENABLED=0 go build -trimpath -o bin/queentest ./cmd/queentest
#	docker build -t queen-go/queentest .
#
# (bin/ is git-ignored; .dockerignore sends only bin/queentest to the
# engine.) Run it:
#
#	docker run --rm -p 6632:6632 queen-go/queentest                              # Queen 2.x API
#	docker run --rm -p 6632:6632 -e QUEENTEST_PROFILE=0.15.1 queen-go/queentest  # Queen 0.15.1 API
#
# QUEENTEST_ADDR is the listen address (here 0.0.0.0:6632, the port of a real
# broker); the health check probes that address, so change it there, not
# with -addr. queencontainer.Run(t, queencontainer.WithImage("queen-go/queentest"))
# runs the image from a Go test.
FROM scratch
COPY bin/queentest /queentest
ENV QUEENTEST_ADDR=0.0.0.0:6632
EXPOSE 6632
LABEL org.opencontainers.image.title="queentest" \
      org.opencontainers.image.description="In-memory Queen MQ broker (queen-go's queentest), 2.x or 0.15.1 API" \
      org.opencontainers.image.source="https://github.com/queen-go/queen"
# A scratch image has no shell or curl: the binary probes its own /health.
HEALTHCHECK --interval=5s --timeout=6s --start-period=2s --retries=3 CMD ["/queentest", "probe"]
ENTRYPOINT ["/queentest"]
