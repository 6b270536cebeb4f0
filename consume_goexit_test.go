package queen

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
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

// OnLoopError may be called from several goroutines at once (its doc
// says so): here two pops' renewals fail at the same tick, and the hook
// runs for both side by side.
func TestLoopErrorCalledConcurrently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.maxPart = 1 // a pop per partition: two leases
		f.add("a", 1)
		f.add("b", 1)
		f.renewEr = errors.New("connection reset")
		var mu sync.Mutex
		inside, most := 0, 0
		e, _ := testEngine(t, context.Background(), f, engineConfig{each: true, slots: 2, renewEvery: 10 * time.Millisecond, renewSecs: 1}, 2,
			func(context.Context, *Message) error {
				time.Sleep(15 * time.Millisecond)
				return nil
			})
		e.on.onLoopError = func(context.Context, error) {
			mu.Lock()
			inside++
			most = max(most, inside)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			inside--
			mu.Unlock()
		}
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		if most < 2 {
			t.Fatalf("OnLoopError ran at most %d at once, want 2", most)
		}
	})
}
