package queen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/queen-go/queen/queentest"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func failMsg(p, txn string) *Message { return &Message{PartitionID: p, TransactionID: txn} }

// failFirst is a handler that records when each call came and fails the
// first one.
type failFirst struct {
	mu sync.Mutex
	at []time.Time
}

func (h *failFirst) handle(context.Context, *Message) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.at = append(h.at, time.Now())
	if len(h.at) == 1 {
		return errors.New("once")
	}
	return nil
}

// times returns when each call came.
func (h *failFirst) times() []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Time(nil), h.at...)
}

// The counter counts each message's failures across its deliveries, by
// partition and transaction id (a copy of the message counts as the
// message); done forgets one.
func TestFailureCounterCounts(t *testing.T) {
	fc := newFailureCounter(100)
	a, b := failMsg("p", "a"), failMsg("p", "b")
	assert.Equal(t, 1, fc.failed(a))
	c := *a
	assert.Equal(t, 2, fc.failed(&c), "a copy of the message is the message")
	assert.Equal(t, 1, fc.failed(b))
	assert.Equal(t, 2, fc.size())
	fc.done(a)
	assert.Equal(t, 0, fc.count(a))
	assert.Equal(t, 1, fc.count(b))
	fc.done(b)
	fc.done(b) // twice, or with nothing counted: nothing happens
	assert.Equal(t, 0, fc.size())
}

// The counter forgets its oldest counts past its bound, and keeps its
// bookkeeping bounded when messages come and go.
func TestFailureCounterBounded(t *testing.T) {
	fc := newFailureCounter(3)
	for i := range 5 {
		fc.failed(failMsg("p", fmt.Sprint(i)))
	}
	assert.Equal(t, 3, fc.size())
	assert.Equal(t, 0, fc.count(failMsg("p", "0")), "the oldest is forgotten")
	assert.Equal(t, 1, fc.count(failMsg("p", "4")))
	for i := range 1000 {
		m := failMsg("q", fmt.Sprint(i))
		fc.failed(m)
		fc.done(m)
	}
	assert.LessOrEqual(t, len(fc.order), 2*3+1)
}

// A failed message is retried where it failed: the handler is called
// again with it after retryDelay (Attempt 2, then 3), its partition
// leased all along and renewed by the loop without RenewLease, nothing
// after it handled meanwhile; the broker hears only of the completion.
// One pop, no retry or failed ack.
func TestRetryInPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.rule = &retryRule{known: true, limit: 2, delay: 10 * time.Second, lease: 30 * time.Second}
		f.add("p", 2)
		var mu sync.Mutex
		var calls []string
		var at []time.Time
		e, _ := testEngine(t, context.Background(), f, engineConfig{each: true, idle: 10 * time.Second}, 4,
			func(_ context.Context, m *Message) error {
				mu.Lock()
				defer mu.Unlock()
				calls = append(calls, fmt.Sprintf("%s#%d", m.TransactionID, m.Attempt()))
				at = append(at, time.Now())
				if m.TransactionID == "p/0" && m.Attempt() < 3 {
					f.mu.Lock()
					leased := f.leased["p"]
					f.mu.Unlock()
					assert.Equal(t, "L1", leased, "the partition left the loop during the retries")
					return errors.New("not yet")
				}
				return nil
			})
		require.NoError(t, runEngine(t, e))
		assert.Equal(t, []string{"p/0#1", "p/0#2", "p/0#3", "p/1#1"}, calls)
		assert.Equal(t, 10*time.Second, at[1].Sub(at[0]), "the retry came before retryDelay")
		assert.Equal(t, 10*time.Second, at[2].Sub(at[1]))
		assert.Equal(t, []string{"p/0:completed", "p/1:completed"}, statuses(f.settles()))
		f.mu.Lock()
		assert.Len(t, f.leases, 1, "the message went back to the broker and was popped again")
		f.mu.Unlock()
		f.mu.Lock()
		renewed := f.renews["L1"]
		f.mu.Unlock()
		assert.GreaterOrEqual(t, renewed, 1, "the held failure's lease was not renewed")
		assert.Empty(t, f.left())
	})
}

// The failure past retryLimit dead-letters the message with its error,
// and the partition goes on: the messages after it are handled in the
// same pop, and acked after the dead letter, in the same request (a dead
// letter ends the lease on 2.x).
func TestRetryInPlaceDeadLetters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.rule = &retryRule{known: true, limit: 1}
		f.add("p", 3)
		var mu sync.Mutex
		calls := map[string]int{}
		e, _ := testEngine(t, context.Background(), f, engineConfig{each: true, idle: 10 * time.Second}, 4,
			func(_ context.Context, m *Message) error {
				mu.Lock()
				defer mu.Unlock()
				calls[m.TransactionID]++
				if m.TransactionID == "p/1" {
					return errors.New("poison")
				}
				return nil
			})
		require.NoError(t, runEngine(t, e))
		assert.Equal(t, map[string]int{"p/0": 1, "p/1": 2, "p/2": 1}, calls)
		settles := f.settles()
		assert.Equal(t, []string{"p/0:completed", "p/1:dlq", "p/2:completed"}, statuses(settles))
		last := settles[len(settles)-1]
		assert.Equal(t, []string{"p/1:dlq", "p/2:completed"}, statuses([][]Settlement{last}),
			"the dead letter and what follows it went apart")
		assert.Equal(t, "poison", last[0].Error)
		assert.Empty(t, f.left())
	})
}

// When the queue's settings cannot be read, failures go out as failed (the
// broker counts), said once at Warn; the settings are asked for at the
// start and once more at the first failure, no more.
func TestConsumeUnreadableRuleFallsBack(t *testing.T) {
	f := newFakeBroker(1)
	f.add("p", 3)
	e, logs := testEngine(t, context.Background(), f, engineConfig{each: true}, 3,
		func(context.Context, *Message) error { return errors.New("fails") })
	require.NoError(t, runEngine(t, e))
	for _, s := range f.settles() {
		assert.Equal(t, StatusFailed, s[0].Status)
	}
	assert.Equal(t, 2, f.ruleReads)
	assert.Equal(t, 1, strings.Count(logs.String(), "could not read the queue's retryLimit"), logs.String())
}

// A consume loop on a queue the broker does not know warns once that its
// first pop creates it (a typo in the name?); on a queue that exists it
// says nothing (issue 21 point 10).
func TestConsumeWarnsOfUnknownQueue(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			var logs bytes.Buffer
			var mu sync.Mutex
			log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
			srv := queentest.Start(t, queentest.WithProfile(p))
			c, err := New(srv.URL, WithLogger(log))
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close(context.Background()) })
			_, err = c.Queue("orders").Push(1).Execute(t.Context())
			require.NoError(t, err)
			for _, q := range []string{"orders", "ordres"} {
				err := c.Queue(q).Wait(false).IdleMillis(50).Consume(t.Context(), func(context.Context, *Message) error { return nil }).Execute(t.Context())
				require.NoError(t, err)
			}
			mu.Lock()
			defer mu.Unlock()
			out := logs.String()
			assert.Equal(t, 1, strings.Count(out, "the queue does not exist on the broker"), out)
			assert.Contains(t, out, "queue=ordres")
			assert.NotContains(t, out, "queue=orders ")
		})
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// SettleHook gives, per message, the outcome the loop chose, the status it
// sent and the broker's answer: a batch handler's Fail with retries left
// goes out as retry (lease released), the one past the limit as dlq
// (dead-lettered); outside the loop the outcome is the status sent (issue
// 21 point 6).
func TestSettleHookSaysChosenSentAnswered(t *testing.T) {
	rec := &recHook{}
	_, c := hookClient(t, nil, rec)
	_, err := c.Queue("work").Config(QueueConfig{RetryLimit: Ptr(1), RetryDelay: Ptr(time.Duration(0)), DeadLetterQueue: Ptr(true)}).Create().Execute(t.Context())
	require.NoError(t, err)
	_, err = c.Queue("work").Push(1, 2).Execute(t.Context())
	require.NoError(t, err)
	// A batch handler's failure is given back (retry while retries are
	// left, dlq past them): the one way a Fail goes out as retry.
	err = c.Queue("work").Batch(1).Limit(2).
		ConsumeBatch(t.Context(), func(context.Context, []*Message) error { return errors.New("poison") }).
		Execute(t.Context())
	require.NoError(t, err)
	msgs := popAll(t, c, "work", "")
	require.Len(t, msgs, 1)
	_, err = c.SettleBatch(t.Context(), []Settlement{{Message: msgs[0], Status: StatusCompleted}}, AckOptions{})
	require.NoError(t, err)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	var got []SettledMessage
	for _, s := range rec.settle {
		require.Len(t, s.Messages, len(s.Settlements))
		got = append(got, s.Messages...)
	}
	assert.Equal(t, []SettledMessage{
		{Outcome: StatusFailed, Sent: StatusRetry, Answer: AnswerLeaseReleased},
		{Outcome: StatusFailed, Sent: StatusDLQ, Answer: AnswerDeadLettered},
		{Outcome: StatusCompleted, Sent: StatusCompleted, Answer: AnswerLeaseReleased},
	}, got)
}

// failureRequests runs issue 20's failures (4 partitions of 100, every
// 7th message failing once) through the engine over the fake broker, one
// slot, Batch(50), and returns the requests it sent (pops, batch acks,
// reads of the queue's settings) and the failures. known: the queue's
// retry settings can be read (the loop counts), or not (the broker does).
func failureRequests(tb testing.TB, known bool, fail bool) (requests, failures int) {
	f := newFakeBroker(50)
	if known {
		f.rule = &retryRule{known: true, limit: 2}
	}
	for p := range 4 {
		f.add(fmt.Sprintf("p%d", p), 100)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	limit := 400 + 56
	if !fail {
		limit = 400
	}
	e, _ := testEngine(tb, context.Background(), f, engineConfig{each: true}, limit,
		func(_ context.Context, m *Message) error {
			mu.Lock()
			defer mu.Unlock()
			i := int(m.Offset)
			if fail && (i+1)%7 == 0 && !seen[m.TransactionID] {
				seen[m.TransactionID] = true
				failures++
				return errors.New("once")
			}
			return nil
		})
	if err := e.run(); err != nil {
		tb.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.parts["p0"])+len(f.parts["p1"])+len(f.parts["p2"])+len(f.parts["p3"]) != 0 {
		tb.Fatal("messages left")
	}
	return len(f.pops) + len(f.acks) + f.ruleReads, failures
}

// The loop's own count costs at most one request per failure over the
// broker's count, and in fact fewer: a failure is retried in place, where
// the broker's count gives the rest of its partition back to be popped
// again; the queue's settings are read once per loop.
func TestFailureCostsAtMostOneRequest(t *testing.T) {
	clean, _ := failureRequests(t, true, false)
	loop, n := failureRequests(t, true, true)
	broker, _ := failureRequests(t, false, true)
	t.Logf("requests: %d without failures, %d with %d failures counted by the loop, %d counted by the broker", clean, loop, n, broker)
	if n != 56 {
		t.Fatalf("%d failures, want 56", n)
	}
	if loop-broker > n {
		t.Fatalf("the loop's count sent %d requests, the broker's %d: more than one per failure", loop, broker)
	}
	if loop-broker > 1 {
		t.Fatalf("the loop's count sent %d requests, the broker's %d: want at most the one read of the queue's settings more", loop, broker)
	}
}

// BenchmarkFailureCost reports what the loop's count costs per failure
// over the broker's (count-req/failure: at most one, in fact below zero:
// a retry in place pops nothing again), and what a failure costs over the
// same messages without failures (extra-req/failure).
func BenchmarkFailureCost(b *testing.B) {
	var clean, loop, broker, n int
	for b.Loop() {
		clean, _ = failureRequests(b, true, false)
		loop, n = failureRequests(b, true, true)
		broker, _ = failureRequests(b, false, true)
	}
	b.ReportMetric(float64(loop-clean)/float64(n), "extra-req/failure")
	b.ReportMetric(float64(loop-broker)/float64(n), "count-req/failure")
}

// The queue's settings: from the queue's view (2.x options); a view
// without them (0.15.1, get_queue_v2) sends the loop to the failed
// message's view (queueConfig); an unknown queue is errQueueUnknown. Each
// read is one request.
func TestRetryRuleReads(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v1/resources/queues/v2":
			_, _ = io.WriteString(w, `{"name":"v2","options":{"retryLimit":4,"retryDelay":250,"leaseTime":60,"deadLetterQueue":false,"dlqAfterMaxRetries":false}}`)
		case "/api/v1/resources/queues/v015":
			_, _ = io.WriteString(w, `{"id":"7d1c","name":"v015","namespace":null,"task":null,"createdAt":"2026-12-01T10:00:00.000Z","partitions":[],"totals":{"total":1,"pending":1,"processing":0,"completed":0,"failed":0,"deadLetter":0}}`)
		case "/api/v1/messages/pid-1/txn-1":
			_, _ = io.WriteString(w, `{"id":"m","queueConfig":{"leaseTime":300,"retryLimit":1,"retryDelay":1000,"ttl":3600,"priority":0}}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":"Queue not found"}`)
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, WithRetryPolicy(RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}))
	require.NoError(t, err)
	defer c.Close(context.Background())
	read := func(q string, m *Message) (retryRule, error) {
		b, err := newClientBroker(c.Queue(q))
		require.NoError(t, err)
		return b.retryRule(t.Context(), m)
	}
	r, err := read("v2", nil)
	require.NoError(t, err)
	assert.Equal(t, retryRule{known: true, limit: 4, delay: 250 * time.Millisecond, lease: time.Minute, dlqOff: true}, r)

	_, err = read("v015", nil)
	require.Error(t, err, "a view without retryLimit and no message to ask about")
	r, err = read("v015", &Message{PartitionID: "pid-1", TransactionID: "txn-1"})
	require.NoError(t, err)
	assert.Equal(t, retryRule{known: true, limit: 1, delay: time.Second, lease: 300 * time.Second}, r)

	_, err = read("typo", nil)
	require.ErrorIs(t, err, errQueueUnknown)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"/api/v1/resources/queues/v2", "/api/v1/resources/queues/v015",
		"/api/v1/resources/queues/v015", "/api/v1/messages/pid-1/txn-1", "/api/v1/resources/queues/typo"}, paths)
}

// Without RenewLease a pop holding a failed message is renewed every third
// of the lease (the shorter of the pops' LeaseTime and the queue's: a
// 0.15.1 broker ignores the pops'), each renewal by a whole lease, from
// the failure until the retry's outcome: an hour's retryDelay keeps the
// partition. With the lease unknown, every 10 s by 30 s.
func TestRetryHoldRenewsWithoutRenewLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.rule = &retryRule{known: true, limit: 2, delay: time.Hour, lease: 300 * time.Second}
		f.add("p", 1)
		var h failFirst
		e, _ := testEngine(t, context.Background(), f, engineConfig{each: true, lease: 30 * time.Second}, 2, h.handle)
		require.NoError(t, e.run())
		at := h.times()
		require.Len(t, at, 2)
		assert.Equal(t, time.Hour, at[1].Sub(at[0]))
		f.mu.Lock()
		renewed := f.renews["L1"]
		f.mu.Unlock()
		assert.InDelta(t, 360, renewed, 2, "renewals every 10 s of the hour")
		assert.Equal(t, []string{"p/0:completed"}, statuses(f.settles()))
	})
}

// renewPlan: RenewLease's interval when set; else, while a failure is
// held, a third of the shorter lease, by a whole lease; nothing otherwise.
func TestRenewPlanTakesTheShorterLease(t *testing.T) {
	l := &loop{cfg: &engineConfig{lease: 10 * time.Minute}}
	l.rules.rule = retryRule{known: true, lease: 30 * time.Second}
	p := &pop{}
	every, _ := l.renewPlan(p)
	assert.Equal(t, time.Duration(0), every, "no hold, no RenewLease: no renewal")
	p.holding = 1
	every, secs := l.renewPlan(p)
	assert.Equal(t, 10*time.Second, every)
	assert.Equal(t, 30, secs)
	l.cfg.lease = 9 * time.Second
	every, secs = l.renewPlan(p)
	assert.Equal(t, 3*time.Second, every)
	assert.Equal(t, 9, secs)
	l.cfg.lease, l.rules.rule.lease = 0, 0
	every, secs = l.renewPlan(p)
	assert.Equal(t, heldRenewEvery, every)
	assert.Equal(t, heldRenewSecs, secs)
	l.cfg.renewEvery, l.cfg.renewSecs = time.Second, 3
	every, secs = l.renewPlan(p)
	assert.Equal(t, time.Second, every)
	assert.Equal(t, 3, secs)
}

// A message waiting for its retry occupies no handler: with
// Concurrency(1), the messages of another partition, pushed when the
// first one failed and so popped later, are handled and acked during the
// wait, long before retryDelay. The held partition stays leased meanwhile
// (renewed), so nothing of it comes again; a stop ends the wait at once
// and gives the message back (retry).
func TestRetryHoldFreesTheHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.rule = &retryRule{known: true, limit: 2, delay: time.Hour}
		f.add("a", 1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var mu sync.Mutex
		var handled []string
		bDone := make(chan struct{})
		e, _ := testEngine(t, ctx, f, engineConfig{each: true, slots: 1, renewEvery: time.Second, renewSecs: 3}, 0,
			func(_ context.Context, m *Message) error {
				mu.Lock()
				handled = append(handled, m.TransactionID)
				mu.Unlock()
				switch m.TransactionID {
				case "a/0":
					f.add("b", 2) // b comes in a later pop
					return errors.New("fails")
				case "b/0":
					time.Sleep(5 * time.Second) // a's wait goes on meanwhile
				case "b/1":
					close(bDone)
				}
				return nil
			})
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- e.run() }()
		<-bDone
		synctest.Wait() // b's acks are sent
		assert.Less(t, time.Since(start), time.Minute, "b waited for a's retry (retryDelay 1 h)")
		assert.Equal(t, []string{"b/0:completed", "b/1:completed"}, statuses(f.settles()), "only b is acked during a's wait")
		f.mu.Lock()
		aLease, renewed := f.leased["a"], f.renews["L1"]
		f.mu.Unlock()
		assert.Equal(t, "L1", aLease, "a's partition is not leased by its pop during the wait")
		assert.GreaterOrEqual(t, renewed, 4, "a's lease is not renewed during the wait")

		stopAt := time.Now()
		cancel()
		require.NoError(t, <-done)
		assert.Less(t, time.Since(stopAt), time.Second, "the stop did not end the wait at once")
		assert.Equal(t, []string{"b/0:completed", "b/1:completed", "a/0:retry"}, statuses(f.settles()))
		assert.Equal(t, []string{"a/0"}, f.left(), "a/0 is given back")
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []string{"a/0", "b/0", "b/1"}, handled, "a came again during its wait")
	})
}

// A pop holding a failure is not settled: it still counts against the
// pops the loop may hold (at most twice Concurrency in all), so a queue
// whose every partition fails does not pile up held pops. With
// Concurrency(1), a and b wait for their retry, c is not popped until one
// of them is done.
func TestRetryHeldPopsAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.maxPart = 1 // a pop per partition
		f.rule = &retryRule{known: true, limit: 5, delay: time.Hour}
		for _, p := range []string{"a", "b", "c"} {
			f.add(p, 1)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var mu sync.Mutex
		var handled []string
		e, _ := testEngine(t, ctx, f, engineConfig{each: true, slots: 1}, 0,
			func(_ context.Context, m *Message) error {
				mu.Lock()
				defer mu.Unlock()
				handled = append(handled, m.TransactionID)
				return errors.New("fails")
			})
		done := make(chan error, 1)
		go func() { done <- e.run() }()
		time.Sleep(time.Minute) // well within the waits
		synctest.Wait()
		f.mu.Lock()
		pops := len(f.pops)
		f.mu.Unlock()
		assert.Equal(t, 2, pops, "the loop popped while it held 2×Concurrency pops")
		mu.Lock()
		assert.Equal(t, []string{"a/0", "b/0"}, handled)
		mu.Unlock()
		assert.Empty(t, f.settles(), "a wait ended before retryDelay")
		cancel()
		require.NoError(t, <-done)
		assert.Equal(t, []string{"a/0:retry", "b/0:retry"}, statuses(f.settles()), "the stop gives both back")
		assert.Equal(t, []string{"a/0", "b/0", "c/0"}, f.left())
	})
}

// A lease lost during the wait for a retry (told by a renewal) ends the
// wait and sends nothing for the partition, at once and at the stop, and
// the renewals of that pop end.
func TestRetryHoldLeaseLostSendsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.rule = &retryRule{known: true, limit: 2, delay: time.Hour}
		f.add("a", 1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		e, logs := testEngine(t, ctx, f, engineConfig{each: true, slots: 1, renewEvery: time.Second, renewSecs: 3}, 0,
			func(_ context.Context, m *Message) error {
				f.mu.Lock()
				f.lost[m.LeaseID] = true // the next renewal says so
				f.mu.Unlock()
				return errors.New("fails")
			})
		done := make(chan error, 1)
		go func() { done <- e.run() }()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		assert.Contains(t, logs.String(), "lease lost")
		assert.Contains(t, logs.String(), "heldForRetry=true")
		assert.Empty(t, f.settles(), "an ack went for a lost lease")
		f.mu.Lock()
		renewed := f.renews["L1"]
		f.mu.Unlock()
		assert.Equal(t, 1, renewed, "the renewals went on after the lease was lost")
		cancel()
		require.NoError(t, <-done)
		assert.Empty(t, f.settles(), "an ack went for a lost lease at the stop")
	})
}

// A read of the queue's settings that fails on the way is no answer: the
// failure it was for is acked failed, and a later failure, once the
// backoff is over, reads again (and the retries in place resume); a
// failure before that reads nothing, so a handler failing fast makes no
// read per failure.
func TestRetryRuleReadFailureIsNoAnswer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pause    time.Duration // each call takes this long
		reads    int
		statuses []string
	}{
		// the reads at the start and at the first failure fail on the way;
		// the second failure, past the backoff, reads the rule: its count
		// (2) is past the limit, it is dead-lettered.
		{"read again", 5 * time.Second, 3, []string{"p/0:failed", "p/0:dlq"}},
		// every failure at once, within the backoff after the read at the
		// start: no read more.
		{"bounded", 0, 1, []string{"p/0:failed", "p/0:failed", "p/0:failed", "p/0:failed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeBroker(1)
				f.rule = &retryRule{known: true, limit: 1}
				f.ruleErrs = []error{errors.New("connection reset"), errors.New("connection reset")}
				f.add("p", 1)
				e, _ := testEngine(t, context.Background(), f, engineConfig{each: true, idle: 10 * time.Second}, 4,
					func(context.Context, *Message) error {
						time.Sleep(tc.pause)
						return errors.New("fails")
					})
				require.NoError(t, runEngine(t, e))
				assert.Equal(t, tc.reads, f.ruleReads)
				assert.Equal(t, tc.statuses, statuses(f.settles()))
			})
		})
	}
}

// A message held for a RetryDelay longer than the lease keeps its
// partition: the renewals are scheduled off the lease's end, whatever
// the RenewLease interval (here longer than the lease), or without it.
func TestRetryHoldRenewsWithinTheLease(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  engineConfig
		took time.Duration // the failing call's time
	}{
		{"RenewLease longer than the lease", engineConfig{each: true, renewEvery: 20 * time.Second, renewSecs: 60}, 0},
		{"no RenewLease, failure late in the lease", engineConfig{each: true}, 8 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeBroker(10)
				f.leaseFor = 9 * time.Second
				f.rule = &retryRule{known: true, limit: 1, delay: 20 * time.Second, lease: 9 * time.Second}
				f.add("p", 1)
				calls := 0
				e, logs := testEngine(t, context.Background(), f, tc.cfg, 2,
					func(context.Context, *Message) error {
						if calls++; calls == 1 {
							time.Sleep(tc.took)
							return errors.New("once")
						}
						return nil
					})
				require.NoError(t, runEngine(t, e))
				assert.NotContains(t, logs.String(), "lease lost")
				assert.Equal(t, []string{"p/0:completed"}, statuses(f.settles()))
				assert.Equal(t, 2, calls)
			})
		})
	}
}

// A message's failure count is kept until its dlq ack is answered: when
// that ack fails and the message comes back (its lease ran out), it
// comes back with its count (Attempt 3) and is dead-lettered again at
// once, not retried from the start.
func TestRetryCountKeptUntilDLQAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.leaseFor = 5 * time.Second
		f.rule = &retryRule{known: true, limit: 1, lease: 5 * time.Second}
		f.add("p", 1)
		f.setErrs = []error{&BrokerError{Status: http.StatusBadRequest, Message: "refused"}} // the first dlq ack: given up
		var attempts []int
		e, _ := testEngine(t, context.Background(), f, engineConfig{each: true}, 3,
			func(_ context.Context, m *Message) error {
				attempts = append(attempts, m.Attempt())
				return errors.New("poison")
			})
		require.NoError(t, runEngine(t, e))
		assert.Equal(t, []int{1, 2, 3}, attempts)
		assert.Equal(t, []string{"p/0:dlq", "p/0:dlq"}, statuses(f.settles()))
		assert.Empty(t, f.left())
	})
}
