package queen

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// A renewal extends a lease by about three intervals, in whole seconds:
// never the 60 s floor that kept a crashed worker's messages away.
func TestRenewSeconds(t *testing.T) {
	for _, tc := range []struct{ ms, want int }{
		{5, 1}, {300, 1}, {334, 2}, {1000, 3}, {2000, 6}, {20000, 60}, {100000, 300},
	} {
		if got := renewSeconds(tc.ms); got != tc.want {
			t.Errorf("renewSeconds(%d) = %d, want %d", tc.ms, got, tc.want)
		}
	}
}

// A renewal answered "lost" cancels the handlers of that pop (cause
// ErrLeaseLost), their outcomes are not acked, and the hook hears of it.
func TestLeaseLostCancelsHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.add("p", 2)
		f.lost["L1"] = true
		var cause error
		var hooked atomic.Value
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		e, logs := testEngine(t, ctx, f, engineConfig{each: true, renewEvery: 2 * time.Millisecond, renewSecs: 1}, 2,
			func(ctx context.Context, m *Message) error {
				if m.LeaseID != "L1" {
					return nil
				}
				select {
				case <-ctx.Done():
					cause = context.Cause(ctx)
				case <-time.After(2 * time.Second):
				}
				stop() // the fake never expires the lost lease: nothing more to pop
				return nil
			})
		e.on.onLoopError = func(_ context.Context, err error) { hooked.Store(err) }
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(cause, ErrLeaseLost) {
			t.Fatalf("handler ctx cause %v, want ErrLeaseLost", cause)
		}
		for _, s := range f.settles() {
			if s[0].Message.LeaseID == "L1" {
				t.Fatalf("the lost lease's pop was settled: %v", statuses([][]Settlement{s}))
			}
		}
		var le *LoopError
		if err, _ := hooked.Load().(error); !errors.As(err, &le) || le.Op != LoopOpLease || !errors.Is(err, ErrLeaseLost) || le.LeaseID != "L1" {
			t.Fatalf("hook got %v, want a lease LoopError matching ErrLeaseLost", hooked.Load())
		}
		if !strings.Contains(logs.String(), "level=WARN msg=\"queen: lease lost") {
			t.Fatalf("lease loss not logged:\n%s", logs.String())
		}
	})
}

// A renewal that fails on the way says nothing about the lease: the
// handler goes on, its outcome is acked; one Warn, the hook per failure.
func TestLeaseRenewFailureKeepsHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.add("p", 1)
		f.renewEr = errors.New("connection reset")
		var hooked atomic.Int32
		e, logs := testEngine(t, context.Background(), f, engineConfig{each: true, renewEvery: 2 * time.Millisecond, renewSecs: 1}, 1,
			func(ctx context.Context, m *Message) error {
				for hooked.Load() < 3 {
					time.Sleep(time.Millisecond)
				}
				f.mu.Lock()
				f.renewEr = nil
				n := f.renews["L1"]
				f.mu.Unlock()
				for {
					f.mu.Lock()
					ok := f.renews["L1"] > n
					f.mu.Unlock()
					if ok {
						break
					}
					time.Sleep(time.Millisecond)
				}
				return ctx.Err()
			})
		e.on.onLoopError = func(_ context.Context, err error) {
			var le *LoopError
			if errors.As(err, &le) && le.Op == LoopOpRenew {
				hooked.Add(1)
			}
		}
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		if got := statuses(f.settles()); len(got) != 1 || got[0] != "p/0:completed" {
			t.Fatalf("settled %v, want p/0 completed", got)
		}
		out := logs.String()
		if n := strings.Count(out, "lease renewal failed"); n != 1 || !strings.Contains(out, "lease renewed again") {
			t.Fatalf("%d failure lines, want 1 and a recovery line:\n%s", n, out)
		}
	})
}

// A renewal answered "not alive" because the pop's last acks released
// the lease (applied at the broker, their answer still on its way) is no
// lost lease: no Warn, no LoopError, nothing dropped. The same answer
// while a message of the pop is still unacked is a loss.
func TestLeaseReleasedByAcksIsNotLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.add("p", 2)
		after := make(chan struct{})
		f.setAfter = after
		var loopErrs atomic.Int32
		e, logs := testEngine(t, context.Background(), f, engineConfig{each: true, renewEvery: 2 * time.Millisecond, renewSecs: 1}, 2,
			func(context.Context, *Message) error { return nil })
		e.on.onLoopError = func(_ context.Context, err error) {
			t.Errorf("OnLoopError(%v)", err)
			loopErrs.Add(1)
		}
		done := make(chan error, 1)
		go func() { done <- e.run() }()
		// The acks are applied (the lease released) and their answer held;
		// renewals go meanwhile and find the lease gone.
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		f.mu.Lock()
		renewed := f.renews["L1"]
		f.mu.Unlock()
		if renewed == 0 {
			t.Fatal("no renewal went while the acks' answer was held")
		}
		close(after)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := statuses(f.settles()); len(got) != 2 {
			t.Fatalf("settled %v, want both completed", got)
		}
		if strings.Contains(logs.String(), "lease lost") {
			t.Fatalf("a release by the pop's own acks was logged as a lost lease:\n%s", logs.String())
		}
	})
}

// A held failure's renewals that fail on the way go again at the next
// tick, not back to back: once two failed, the lease's last third is
// passed and inLease must not bring each next renewal to now.
func TestLeaseHeldRenewFailuresPaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.rule = &retryRule{known: true, limit: 3, delay: 10 * time.Second}
		f.add("p", 1)
		f.renewEr = errors.New("connection refused")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var renewFails atomic.Int32
		e, _ := testEngine(t, ctx, f, engineConfig{each: true, lease: 3 * time.Second}, 0,
			func(context.Context, *Message) error { return errors.New("boom") })
		e.on.onLoopError = func(_ context.Context, err error) {
			var le *LoopError
			if errors.As(err, &le) && le.Op == LoopOpRenew && renewFails.Add(1) == 100 {
				cancel() // a spin: stop it
			}
		}
		time.AfterFunc(9*time.Second, cancel) // within the retry's delay
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		// A renewal each third of the 3 s lease, then (its last third
		// reached) each third of that: about 20 in 9 s, not a spin.
		if n := renewFails.Load(); n == 0 || n > 30 {
			t.Fatalf("%d renewals failed in 9 s, want about one a second", n)
		}
	})
}
