// The project's own vet checks, run by .ci/run with go vet -vettool over
// every module. A module of its own, so that golang.org/x/tools stays out
// of the client's dependencies.
module github.com/queen-go/queen/internal/lint

go 1.26.0

require golang.org/x/tools v0.52.0

require (
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
)
