package queen_test

import (
	"context"
	"encoding/json"
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
					cb = cb.OnError(func(_ context.Context, _ *queen.Message, err error) queen.Outcome {
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

// retryQueue is the queue of the RetryLimit tests: retryLimit 2, no
// retryDelay, a dead-letter queue.
func retryQueue(q *queentest.QueueConfig) {
	q.RetryLimit, q.RetryDelay, q.DeadLetterQueue = 2, 0, true
}

// Through the loop, RetryLimit counts each message's own failures: with
// RetryLimit 2 and Batch(10), messages 1, 4 and 7 of one partition failing
// once each are all completed at their second delivery, none
// dead-lettered (the broker alone would dead-letter message 7 at its first
// failure: TestBrokerCountsRetriesPerPartition). The same failures given
// back with Retry() dead-letter nothing either.
func TestRetryLimitCountsAcrossUnfinishedLeases(t *testing.T) {
	for _, p := range queentest.Profiles() {
		for _, outcome := range []string{"fail", "retry"} {
			t.Run(string(p)+"/"+outcome, func(t *testing.T) {
				e := newEnv(t, withQueueConfig(retryQueue), withProfile(p))
				for i := 1; i <= 10; i++ {
					e.push("q", "p", map[string]int{"n": i})
				}
				var mu sync.Mutex
				failed := map[int]bool{}
				var completed []int
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				cb := e.c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll).Batch(10).Each().Limit(13).
					Consume(ctx, func(_ context.Context, m *queen.Message) error {
						n := int(m.Data["n"].(float64))
						mu.Lock()
						defer mu.Unlock()
						if (n == 1 || n == 4 || n == 7) && !failed[n] {
							failed[n] = true
							return fmt.Errorf("message %d fails once", n)
						}
						completed = append(completed, n)
						return nil
					})
				if outcome == "retry" {
					cb = cb.OnError(func(context.Context, *queen.Message, error) queen.Outcome { return queen.Retry() })
				}
				if err := cb.Execute(ctx); err != nil {
					t.Fatalf("Execute: %v", err)
				}
				page, err := e.c.Admin().ListDLQ(ctx, "q", queen.DLQListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				defer mu.Unlock()
				if len(page.Messages) != 0 {
					t.Fatalf("dead letters %+v, want none (each message failed once)", page.Messages)
				}
				if want := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}; fmt.Sprint(completed) != fmt.Sprint(want) {
					t.Fatalf("completed %v, want %v", completed, want)
				}
			})
		}
	}
}

// The broker's own counting, through raw acks (Pop and SettleBatch, as
// the loop sent them before it counted itself): per partition and group,
// across the leases that end unfinished. With retryLimit 2, messages 1, 4
// and 7 failing once each, message 7 is dead-lettered at its first
// failure, retryCount 2.
func TestBrokerCountsRetriesPerPartition(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			e := newEnv(t, withQueueConfig(retryQueue), withProfile(p))
			for i := 1; i <= 10; i++ {
				e.push("q", "p", map[string]int{"n": i})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			failed := map[int]bool{}
			var completed []int
			for round := 0; len(completed) < 9 && round < 10; round++ {
				msgs, err := e.c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll).Batch(10).Wait(false).Pop(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var acks []queen.Settlement
				for i, m := range msgs {
					n := int(m.Data["n"].(float64))
					if (n == 1 || n == 4 || n == 7) && !failed[n] {
						failed[n] = true
						acks = append(acks, queen.Settlement{Message: m, Status: queen.StatusFailed, Error: "once"})
						for _, r := range msgs[i+1:] {
							acks = append(acks, queen.Settlement{Message: r, Status: queen.StatusRetry})
						}
						break
					}
					completed = append(completed, n)
					acks = append(acks, queen.Settlement{Message: m, Status: queen.StatusCompleted})
				}
				if len(acks) > 0 {
					if _, err := e.c.SettleBatch(ctx, acks, queen.AckOptions{ConsumerGroup: "g"}); err != nil {
						t.Fatal(err)
					}
				}
			}
			page, err := e.c.Admin().ListDLQ(ctx, "q", queen.DLQListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Messages) != 1 {
				t.Fatalf("dead letters = %+v, want message 7 alone", page.Messages)
			}
			dl := page.Messages[0]
			var body struct{ N int }
			if err := json.Unmarshal(dl.Payload, &body); err != nil || body.N != 7 || dl.RetryCount != 2 {
				t.Fatalf("dead letter = n %d (%v), retryCount %d; want n 7 with retryCount 2", body.N, err, dl.RetryCount)
			}
			if want := []int{1, 2, 3, 4, 5, 6, 8, 9, 10}; fmt.Sprint(completed) != fmt.Sprint(want) {
				t.Fatalf("completed %v, want %v (7 dead-lettered at its first failure)", completed, want)
			}
		})
	}
}

// workload is issue 20's: 400 messages over 4 partitions, every 7th of a
// partition failing once, one poison message (p1, i 50) failing always.
type workload struct {
	mu         sync.Mutex
	deliveries map[string]int
	completed  map[string]int
}

const (
	workParts   = 4
	workPerPart = 100
	workRetries = 2                                              // the queue's retryLimit
	workOnce    = workParts * (workPerPart / 7)                  // messages that fail once: 56
	workCalls   = workParts*workPerPart + workOnce + workRetries // handler calls in all
)

func workKey(round int, part string, i int) string { return fmt.Sprintf("%d/%s/%d", round, part, i) }

func poisonKey(round int) string { return workKey(round, "p1", 50) }

func (w *workload) push(e *env, round int) {
	for p := range workParts {
		part := fmt.Sprintf("p%d", p)
		payloads := make([]any, workPerPart)
		for i := range payloads {
			payloads[i] = map[string]any{"r": round, "p": part, "i": i}
		}
		e.push("q", part, payloads...)
	}
}

func (w *workload) handle(_ context.Context, m *queen.Message) error {
	k := workKey(int(m.Data["r"].(float64)), m.Data["p"].(string), int(m.Data["i"].(float64)))
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deliveries[k]++
	i := int(m.Data["i"].(float64))
	switch {
	case k == poisonKey(int(m.Data["r"].(float64))):
		return errors.New("poison")
	case (i+1)%7 == 0 && w.deliveries[k] == 1:
		return errors.New("fails once")
	}
	w.completed[k]++
	return nil
}

// run consumes one round through the loop: Each(), Batch(50),
// Concurrency(2), autoAck, until every call the round needs was made.
func (w *workload) run(t *testing.T, e *env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := e.c.Queue("q").Each().Batch(50).Concurrency(2).Limit(workCalls).Consume(ctx, w.handle).Execute(ctx)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
}

// check asserts a round's counts: the poison delivered 1 + RetryLimit
// times and dead-lettered, every other message completed once, the 56 that
// failed once at their second delivery.
func (w *workload) check(t *testing.T, round int) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	once := 0
	for p := range workParts {
		part := fmt.Sprintf("p%d", p)
		for i := range workPerPart {
			k := workKey(round, part, i)
			switch {
			case k == poisonKey(round):
				if w.deliveries[k] != 1+workRetries || w.completed[k] != 0 {
					t.Errorf("poison %s delivered %d times (completed %d), want %d", k, w.deliveries[k], w.completed[k], 1+workRetries)
				}
			case (i+1)%7 == 0:
				once++
				if w.deliveries[k] != 2 || w.completed[k] != 1 {
					t.Errorf("%s (fails once) delivered %d times, completed %d; want 2 and 1", k, w.deliveries[k], w.completed[k])
				}
			default:
				if w.deliveries[k] != 1 || w.completed[k] != 1 {
					t.Errorf("%s delivered %d times, completed %d; want 1 and 1", k, w.deliveries[k], w.completed[k])
				}
			}
		}
	}
	if once != workOnce {
		t.Fatalf("the workload has %d messages that fail once, want %d", once, workOnce)
	}
}

// Issue 20's workload through the loop, on both profiles: 0 of the 56
// messages that failed once are dead-lettered, the poison message is
// delivered exactly 1 + RetryLimit times and then dead-lettered (with its
// error, retryCount 0: the loop never spent the broker's count), every
// other message is completed; and the same in a second round on the same
// queue, after the first round's dead-letter on the same partition.
func TestRetryLimitPerMessageWorkload(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			e := newEnv(t, withQueueConfig(retryQueue), withProfile(p))
			w := &workload{deliveries: map[string]int{}, completed: map[string]int{}}
			for round := 1; round <= 2; round++ {
				w.push(e, round)
				w.run(t, e)
				w.check(t, round)
				page, err := e.c.Admin().ListDLQ(context.Background(), "q", queen.DLQListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, dl := range page.Messages {
					var body struct {
						R int
						P string
						I int
					}
					if err := json.Unmarshal(dl.Payload, &body); err != nil {
						t.Fatal(err)
					}
					got = append(got, workKey(body.R, body.P, body.I))
					if dl.Error != "poison" || dl.RetryCount != 0 {
						t.Errorf("dead letter %s: error %q, retryCount %d; want \"poison\", 0", got[len(got)-1], dl.Error, dl.RetryCount)
					}
				}
				sort.Strings(got)
				want := []string{poisonKey(1), poisonKey(2)}[:round]
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("round %d: dead letters %v, want %v", round, got, want)
				}
			}
			if n := e.srv.LeasedCount("q", ""); n != 0 {
				t.Fatalf("%d messages left leased", n)
			}
		})
	}
}

// A 2.x queue whose dead-letter queue is off: the failure past RetryLimit
// goes out as failed, and the broker drops the message once its own
// per-partition count is spent (here at the next failure: the loop's
// retries charged nothing). Nothing is dead-lettered, and the partition's
// other messages are completed.
func TestRetryLimitWithoutDLQDrops(t *testing.T) {
	e := newEnv(t, withQueueConfig(func(q *queentest.QueueConfig) {
		q.RetryLimit, q.RetryDelay, q.DeadLetterQueue, q.DLQAfterMaxRetries = 1, 0, false, false
	}))
	e.push("q", "p", map[string]int{"n": 1}, map[string]int{"n": 2}, map[string]int{"n": 3})
	var mu sync.Mutex
	calls := map[int]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := e.c.Queue("q").Batch(10).Each().Limit(5).
		Consume(ctx, func(_ context.Context, m *queen.Message) error {
			n := int(m.Data["n"].(float64))
			mu.Lock()
			defer mu.Unlock()
			calls[n]++
			if n == 2 {
				return errors.New("poison")
			}
			return nil
		}).Execute(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := map[int]int{1: 1, 2: 3, 3: 1}; fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Fatalf("deliveries %v, want %v (the poison: retry, failed charged, failed dropped)", calls, want)
	}
	if n := e.srv.DLQCount("q"); n != 0 {
		t.Fatalf("%d dead letters, want none (the queue has no dead-letter queue)", n)
	}
	if left := e.peek("q", ""); len(left) != 0 {
		t.Fatalf("left %v", keys(left))
	}
}
