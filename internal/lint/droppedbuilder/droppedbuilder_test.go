package droppedbuilder_test

import (
	"testing"

	"github.com/queen-go/queen/internal/lint/droppedbuilder"
	"golang.org/x/tools/go/analysis/analysistest"
)

// testdata/src/use: every dropped builder is reported (a want comment), a
// used one, a transaction's accumulating call and other types are not.
func TestDroppedBuilder(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), droppedbuilder.Analyzer, "use")
}
