// Command queenvet runs the project's own checks under go vet:
//
//	go build -o /tmp/queenvet ./cmd/queenvet
//	go vet -vettool=/tmp/queenvet ./...
package main

import (
	"github.com/queen-go/queen/internal/lint/droppedbuilder"
	"golang.org/x/tools/go/analysis/unitchecker"
)

func main() { unitchecker.Main(droppedbuilder.Analyzer) }
