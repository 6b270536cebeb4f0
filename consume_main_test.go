package queen_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine is left running after
// them (consume loops, renewers, long polls, test brokers).
//
// Temporary home: the root package's helpers_test.go in main carries the
// same TestMain; this file goes away when that lands here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
