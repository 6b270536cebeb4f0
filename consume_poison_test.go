package queen_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// A handler's Poison error dead-letters its message at first delivery,
// with the error's text, though the queue's RetryLimit (2) has retries
// left: under Consume, with AutoAck(false), and from an OnError whose zero
// Outcome leaves the choice to the loop. Under ConsumeBatch it
// dead-letters the whole batch. An OnError that maps it to Complete wins.
func TestPoisonDeadLettersAtOnce(t *testing.T) {
	type want struct {
		dead      []int // dead-lettered, by n
		completed []int // handled with success, by n
	}
	cases := []struct {
		name  string
		batch bool
		ackOff,
		onErrZero, onErrComplete, poisonLast bool
		want want
	}{
		{name: "consume", want: want{dead: []int{2}, completed: []int{1, 3}}},
		// The poison message last: a 2.x partition's cursor passes a message
		// when a later one is acked, as the handler acks its own before the
		// pop's batch ack.
		{name: "autoack-off", ackOff: true, poisonLast: true, want: want{dead: []int{2}, completed: []int{1, 3}}},
		// The poison message in the middle: the loop gives back the rest of
		// its partition (as after a failure), so the handler's own ack of 3
		// comes only after the dead-lettering, in a later pop.
		{name: "autoack-off-middle", ackOff: true, want: want{dead: []int{2}, completed: []int{1, 3}}},
		{name: "onerror-zero", onErrZero: true, want: want{dead: []int{2}, completed: []int{1, 3}}},
		{name: "onerror-complete", onErrComplete: true, want: want{completed: []int{1, 3}}},
		{name: "batch", batch: true, want: want{dead: []int{1, 2, 3}}},
	}
	for _, p := range queentest.Profiles() {
		for _, tc := range cases {
			t.Run(string(p)+"/"+tc.name, func(t *testing.T) {
				e := newEnv(t, withQueueConfig(retryQueue), withProfile(p))
				if tc.poisonLast {
					e.push("q", "p", map[string]int{"n": 1}, map[string]int{"n": 3}, map[string]any{"n": "two"})
				} else {
					e.push("q", "p", map[string]int{"n": 1}, map[string]any{"n": "two"}, map[string]int{"n": 3})
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				var mu sync.Mutex
				deliveries := map[string]int{}
				var completed []int
				type order struct{ N int }
				handle := func(ctx context.Context, m *queen.Message) error {
					mu.Lock()
					defer mu.Unlock()
					deliveries[string(m.Raw)]++
					o, err := queen.Decode[order](m)
					if err != nil {
						return queen.Poison(err)
					}
					completed = append(completed, o.N)
					if tc.ackOff {
						_, err := e.c.Ack(ctx, m, true, queen.AckOptions{ConsumerGroup: "g"})
						return err
					}
					return nil
				}
				qb := e.c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll).Batch(3).Limit(3)
				if tc.ackOff {
					qb = qb.AutoAck(false)
				}
				var cb *queen.ConsumeBuilder
				if tc.batch {
					cb = qb.ConsumeBatch(ctx, func(ctx context.Context, msgs []*queen.Message) error {
						if len(msgs) != 3 {
							return fmt.Errorf("batch of %d, want 3", len(msgs))
						}
						for _, m := range msgs {
							if err := handle(ctx, m); err != nil {
								return fmt.Errorf("batch: %w", err)
							}
						}
						return nil
					})
				} else {
					cb = qb.Consume(ctx, handle)
				}
				var seen []error
				if tc.onErrZero || tc.onErrComplete {
					cb.OnError(func(_ context.Context, _ *queen.Message, err error) queen.Outcome {
						mu.Lock()
						seen = append(seen, err)
						mu.Unlock()
						if tc.onErrComplete {
							return queen.Complete()
						}
						return queen.Outcome{}
					})
				}
				if err := cb.Execute(ctx); err != nil {
					t.Fatalf("Execute: %v", err)
				}
				page, err := e.c.Admin().ListDLQ(ctx, "q", queen.DLQListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				var dead []int
				for _, d := range page.Messages {
					n := map[string]int{`{"n":1}`: 1, `{"n":"two"}`: 2, `{"n":3}`: 3}[string(d.Payload)]
					dead = append(dead, n)
					if !strings.Contains(d.Error, "decode message") {
						t.Errorf("dead letter %d has reason %q, want the decode error's text", n, d.Error)
					}
				}
				sort.Ints(dead)
				mu.Lock()
				defer mu.Unlock()
				if fmt.Sprint(dead) != fmt.Sprint(tc.want.dead) {
					t.Errorf("dead-lettered %v, want %v", dead, tc.want.dead)
				}
				if fmt.Sprint(completed) != fmt.Sprint(tc.want.completed) && !tc.batch {
					t.Errorf("completed %v, want %v", completed, tc.want.completed)
				}
				if n := deliveries[`{"n":"two"}`]; n != 1 {
					t.Errorf("the poison message was delivered %d times, want 1 (no retry spent)", n)
				}
				for _, err := range seen {
					if _, ok := errors.AsType[*queen.PoisonError](err); !ok {
						t.Errorf("OnError got %v, which errors.As does not find a *PoisonError in", err)
					}
				}
				if (tc.onErrZero || tc.onErrComplete) && len(seen) == 0 {
					t.Error("OnError was not called")
				}
				if left := e.peek("q", "g"); len(left) != 0 {
					t.Errorf("%d messages left for the group, want none", len(left))
				}
			})
		}
	}
}

// Poison wraps its error: errors.Is reaches the cause, the text is the
// cause's, and Poison(nil) is nil.
func TestPoisonWraps(t *testing.T) {
	cause := errors.New("bad payload")
	err := fmt.Errorf("order 7: %w", queen.Poison(cause))
	if !errors.Is(err, cause) {
		t.Error("errors.Is does not reach the cause")
	}
	if p, ok := errors.AsType[*queen.PoisonError](err); !ok || p.Err != cause {
		t.Errorf("errors.As found %v, %v", p, ok)
	}
	if got := queen.Poison(cause).Error(); got != "bad payload" {
		t.Errorf("text %q, want the cause's", got)
	}
	if queen.Poison(nil) != nil {
		t.Error("Poison(nil) is not nil")
	}
}
