package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen"
)

// TestRetryLimitPerMessageThroughLoop is issue 20's workload through the
// consume loop, on any broker: a queue with retryLimit 2 and a dead-letter
// queue, 400 messages over 4 partitions, Each(), Batch(50), Concurrency(2),
// autoAck, a handler that fails every 7th message of a partition once (56
// messages) and one poison message always. None of the 56 is
// dead-lettered, the poison message is delivered exactly 1 + retryLimit
// times and then dead-lettered, every other message is completed; and the
// same in a second round after that dead-letter on the same partition.
// The broker's own per-partition count stays tested through raw acks
// (failure_test.go).
func TestRetryLimitPerMessageThroughLoop(t *testing.T) {
	t.Parallel()
	const (
		parts, perPart, retryLimit = 4, 100, 2
		once                       = parts * (perPart / 7)
		calls                      = parts*perPart + once + retryLimit
	)
	c := newClient(t)
	q := unique("retry-limit")
	newQueue(t, c, q, queen.QueueConfig{
		LeaseTime: queen.Ptr(30 * time.Second), RetryLimit: queen.Ptr(retryLimit), RetryDelay: queen.Ptr(time.Duration(0)),
		DeadLetterQueue: queen.Ptr(true),
	})
	key := func(r int, p string, i int) string { return fmt.Sprintf("%d/%s/%d", r, p, i) }
	poison := func(r int) string { return key(r, "p1", 50) }
	var mu sync.Mutex
	deliveries, completed := map[string]int{}, map[string]int{}
	handle := func(_ context.Context, m *queen.Message) error {
		r, p, i := int(m.Data["r"].(float64)), m.Data["p"].(string), int(m.Data["i"].(float64))
		k := key(r, p, i)
		mu.Lock()
		defer mu.Unlock()
		deliveries[k]++
		switch {
		case k == poison(r):
			return errors.New("poison")
		case (i+1)%7 == 0 && deliveries[k] == 1:
			return errors.New("fails once")
		}
		completed[k]++
		return nil
	}
	for round := 1; round <= 2; round++ {
		for p := range parts {
			part := fmt.Sprintf("p%d", p)
			payloads := make([]any, perPart)
			for i := range payloads {
				payloads[i] = map[string]any{"r": round, "p": part, "i": i}
			}
			push(t, c, q, part, payloads...)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*scenarioTimeout)
		err := c.Queue(q).Each().Batch(50).Concurrency(2).Limit(calls).Consume(ctx, handle).Execute(ctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: Execute: %v", round, err)
		}
		mu.Lock()
		dlOnce, twice, other := 0, 0, 0
		for p := range parts {
			part := fmt.Sprintf("p%d", p)
			for i := range perPart {
				k := key(round, part, i)
				switch {
				case k == poison(round):
					if deliveries[k] != 1+retryLimit || completed[k] != 0 {
						t.Errorf("poison %s delivered %d times, completed %d; want %d, 0", k, deliveries[k], completed[k], 1+retryLimit)
					}
				case (i+1)%7 == 0:
					if deliveries[k] == 2 && completed[k] == 1 {
						twice++
					} else {
						dlOnce++
						t.Errorf("%s (fails once) delivered %d times, completed %d; want 2, 1", k, deliveries[k], completed[k])
					}
				case deliveries[k] != 1 || completed[k] != 1:
					other++
					t.Errorf("%s delivered %d times, completed %d; want 1, 1", k, deliveries[k], completed[k])
				}
			}
		}
		mu.Unlock()
		page, err := c.Admin().ListDLQ(testCtx(t), q, queen.DLQListOptions{Limit: 100})
		if err != nil {
			t.Fatalf("ListDLQ: %v", err)
		}
		var dead []string
		for _, dl := range page.Messages {
			var body struct {
				R int
				P string
				I int
			}
			if err := json.Unmarshal(dl.Payload, &body); err != nil {
				t.Fatal(err)
			}
			dead = append(dead, key(body.R, body.P, body.I))
			if dl.Error != "poison" || dl.RetryCount != 0 {
				t.Errorf("dead letter %s: error %q, retryCount %d; want \"poison\" and 0 (the loop spends none of the broker's count)",
					dead[len(dead)-1], dl.Error, dl.RetryCount)
			}
		}
		sort.Strings(dead)
		t.Logf("%s round %d: %d of %d once-failed completed at their 2nd delivery, %d not; other messages wrong: %d; dead letters %v",
			be.kind, round, twice, once, dlOnce, other, dead)
		if want := []string{poison(1), poison(2)}[:round]; fmt.Sprint(dead) != fmt.Sprint(want) {
			t.Fatalf("round %d: dead letters %v, want %v", round, dead, want)
		}
	}
}

// With a retryDelay the loop holds a failed message's partition for it
// before giving the message back (the broker would hand a retry out again at
// once): through the loop on any broker, 20 messages over 2 partitions, two
// failing once and one always, retryLimit 1, retryDelay 200 ms. Counts, not
// times: each once-failing message is delivered twice and completed, the
// poison message twice and then dead-lettered, each other message once, and
// within its partition every message is completed in push order.
func TestRetryDelayHoldThroughLoop(t *testing.T) {
	t.Parallel()
	const perPart, retryLimit = 10, 1
	c := newClient(t)
	q := unique("retry-hold")
	newQueue(t, c, q, queen.QueueConfig{
		LeaseTime: queen.Ptr(30 * time.Second), RetryLimit: queen.Ptr(retryLimit),
		RetryDelay: queen.Ptr(200 * time.Millisecond), DeadLetterQueue: queen.Ptr(true),
	})
	for _, part := range []string{"a", "b"} {
		payloads := make([]any, perPart)
		for i := range payloads {
			payloads[i] = map[string]any{"p": part, "i": i}
		}
		push(t, c, q, part, payloads...)
	}
	onceA, onceB, poison := "a/3", "b/6", "b/8"
	var mu sync.Mutex
	deliveries := map[string]int{}
	order := map[string][]int{}
	handle := func(_ context.Context, m *queen.Message) error {
		p, i := m.Data["p"].(string), int(m.Data["i"].(float64))
		k := fmt.Sprintf("%s/%d", p, i)
		mu.Lock()
		defer mu.Unlock()
		deliveries[k]++
		switch {
		case k == poison:
			return errors.New("poison")
		case (k == onceA || k == onceB) && deliveries[k] == 1:
			return errors.New("fails once")
		}
		order[p] = append(order[p], i)
		return nil
	}
	calls := 2*perPart + 2 + retryLimit
	ctx, cancel := context.WithTimeout(context.Background(), 2*scenarioTimeout)
	defer cancel()
	if err := c.Queue(q).Each().Batch(10).Concurrency(2).Limit(calls).Consume(ctx, handle).Execute(ctx); err != nil {
		t.Fatalf("Execute: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, part := range []string{"a", "b"} {
		for i := range perPart {
			k := fmt.Sprintf("%s/%d", part, i)
			want := 1
			if k == onceA || k == onceB || k == poison {
				want = 2
			}
			if deliveries[k] != want {
				t.Errorf("%s delivered %d times, want %d", k, deliveries[k], want)
			}
		}
	}
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}; fmt.Sprint(order["a"]) != fmt.Sprint(want) {
		t.Errorf("partition a completed %v, want %v", order["a"], want)
	}
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 9}; fmt.Sprint(order["b"]) != fmt.Sprint(want) {
		t.Errorf("partition b completed %v, want %v (8 dead-lettered)", order["b"], want)
	}
	page, err := c.Admin().ListDLQ(testCtx(t), q, queen.DLQListOptions{Limit: 100})
	if err != nil {
		t.Fatalf("ListDLQ: %v", err)
	}
	if len(page.Messages) != 1 {
		t.Fatalf("dead letters %+v, want only %s", page.Messages, poison)
	}
}
