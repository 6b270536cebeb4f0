package main

import (
	"testing"
	"time"
)

// The worker, on the in-process broker, processes every order and returns
// by itself.
func TestRunProcessesEveryOrder(t *testing.T) {
	t.Setenv("QUEEN_URL", "")
	done := make(chan error, 1)
	go func() { done <- run(500, 4, 3, 0) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not finish by itself")
	}
}
