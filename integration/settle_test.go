package integration

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queen-go/queen"
)

// TestDeadLetterInABatchLeavesTheRestFree: with retryLimit 2 and ten
// messages popped together, messages 1 and 4 failing once each are
// completed at their second delivery (the loop counts each message's own
// failures, not the partition's), and message 7, failing always, is
// dead-lettered at its third failure. The messages after it in the same
// pop (8 and 9) must still come at once: on 0.15.1 a dead-letter that does
// not finish the lease keeps it, so they come only if the loop gives them
// back in the same ack.
func TestDeadLetterInABatchLeavesTheRestFree(t *testing.T) {
	t.Parallel()
	c := newClient(t)
	q := unique("budget")
	newQueue(t, c, q, queen.QueueConfig{
		LeaseTime: queen.Ptr(30 * time.Second), RetryLimit: queen.Ptr(2), RetryDelay: queen.Ptr(100 * time.Millisecond), DeadLetterQueue: queen.Ptr(true),
	})
	push(t, c, q, "p", numbered(0, 10, nil)...)
	errOnce := errors.New("fails once")

	ctx, cancel := context.WithTimeout(testCtx(t), redeliveryWithin)
	defer cancel()
	var (
		mu       sync.Mutex
		failed   = map[int]bool{}
		done     []int
		poisoned int
	)
	err := c.Queue(q).Group("g").SubscriptionMode(queen.SubscriptionModeAll).Batch(10).Each().
		Consume(ctx, func(_ context.Context, m *queen.Message) error {
			n := num(t, m)
			mu.Lock()
			defer mu.Unlock()
			if n == 7 {
				poisoned++
				return errors.New("poison")
			}
			if (n == 1 || n == 4) && !failed[n] {
				failed[n] = true
				return errOnce
			}
			done = append(done, n)
			if len(done) == 9 { // all but 7, which is dead-lettered
				cancel()
			}
			return nil
		}).
		Execute(ctx)
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Execute: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(done)
	if want := []int{0, 1, 2, 3, 4, 5, 6, 8, 9}; !slices.Equal(done, want) || poisoned != 3 {
		t.Errorf("within %v the loop completed %v and handled 7 %d times, want %v and 3 (7 dead-lettered at its third failure, the rest of its pop given back)",
			redeliveryWithin, done, poisoned, want)
	}
	checkDLQ(t, c, q, 1)
}

// TestLoopSizesItsPops: a consume loop left to size its own pops takes many
// messages a request on every broker, also on one that ignores autopilot
// (0.15.1 answers one message to a pop without a batch).
func TestLoopSizesItsPops(t *testing.T) {
	t.Parallel()
	// The pops are counted on their way out, so that any broker will do.
	var pops atomic.Int64
	c := newClientVia(t, be.url, nil, func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/v1/pop/") {
				pops.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	q := unique("sizing")
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	const total = 200
	push(t, c, q, "p", numbered(0, total, nil)...)

	ctx, cancel := context.WithTimeout(testCtx(t), 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	seen := 0
	err := c.Queue(q).Group("g").SubscriptionMode(queen.SubscriptionModeAll).
		Consume(ctx, func(_ context.Context, _ *queen.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if seen++; seen == total {
				cancel()
			}
			return nil
		}).
		Execute(ctx)
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Execute: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen != total {
		t.Fatalf("handled %d of %d messages", seen, total)
	}
	// At least ten messages a pop on average (the empty pops that end the
	// run included).
	if n := pops.Load(); n > total/10 {
		t.Errorf("%d pop requests for %d messages: the loop does not size its pops", n, total)
	}
}
