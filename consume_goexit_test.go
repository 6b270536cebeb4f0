package queen

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// A user callback that ends its goroutine (runtime.Goexit, as t.FailNow
// does) on a fetcher or the sender stops the loop: Execute returns an
// error saying so, rather than wait for an answer that never comes.
func TestLoopErrorGoexitStopsTheLoop(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(f *fakeBroker)
		cfg  engineConfig
	}{
		{"pop", func(f *fakeBroker) { f.popErrs = []error{errors.New("connection reset")} }, engineConfig{each: true}},
		{"settle", func(f *fakeBroker) { f.setErrs = []error{errors.New("connection reset")} }, engineConfig{each: true}},
		{"renew", func(f *fakeBroker) { f.renewEr = errors.New("connection reset") },
			engineConfig{each: true, renewEvery: 2 * time.Millisecond, renewSecs: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeBroker(10)
				f.add("p", 1)
				tc.set(f)
				e, _ := testEngine(t, context.Background(), f, tc.cfg, 1, func(ctx context.Context, _ *Message) error {
					if tc.name == "renew" {
						time.Sleep(10 * time.Millisecond) // a renewal goes meanwhile
					}
					return nil
				})
				e.on.onLoopError = func(context.Context, error) { runtime.Goexit() }
				err := runEngine(t, e)
				if err == nil || !strings.Contains(err.Error(), "Goexit") {
					t.Fatalf("Execute = %v, want the callback's Goexit reported", err)
				}
			})
		})
	}
}
