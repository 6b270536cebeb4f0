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

// A message's failures are counted across its deliveries: retry while at
// most the limit, dlq (with the error, or a default) at the one past it;
// completed and dlq end the count; a retry chosen by the handler counts
// nothing; an unknown rule sends what was chosen.
func TestFailureCounterApply(t *testing.T) {
	fc := newFailureCounter(100)
	rule := retryRule{known: true, limit: 2}
	a, b := failMsg("p", "a"), failMsg("p", "b")
	statuses := func(s []Settlement) string {
		var out []string
		for _, x := range s {
			out = append(out, string(x.Status)+":"+x.Error)
		}
		return strings.Join(out, ",")
	}
	for round, want := range []string{"retry:boom,retry:", "retry:boom,retry:", "dlq:boom,retry:"} {
		chosen := []Settlement{{Message: a, Status: StatusFailed, Error: "boom"}, {Message: b, Status: StatusRetry}}
		sent, retried := fc.apply(rule, chosen)
		assert.Equal(t, want, statuses(sent), "round %d", round)
		assert.Equal(t, round < 2, retried, "round %d", round)
		assert.Equal(t, StatusFailed, chosen[0].Status, "the chosen outcomes stay as they were")
	}
	assert.Equal(t, 0, fc.count(a), "a dead-letter ends the count")
	assert.Equal(t, 0, fc.count(b), "a retry counts nothing")

	sent, _ := fc.apply(rule, []Settlement{{Message: b, Status: StatusFailed}})
	assert.Equal(t, StatusRetry, sent[0].Status)
	fc.apply(rule, []Settlement{{Message: b, Status: StatusCompleted}})
	assert.Equal(t, 0, fc.count(b), "a completion ends the count")

	// RetryLimit 0: the first failure dead-letters, with a default reason.
	sent, _ = fc.apply(retryRule{known: true}, []Settlement{{Message: a, Status: StatusFailed}})
	assert.Equal(t, "dlq:failed 1 times", statuses(sent))

	// A 2.x queue with its dead-letter queue off: past the limit the loop
	// sends failed (the broker drops it once its count is spent), and goes
	// on doing so for that message.
	off := retryRule{known: true, limit: 1, dlqOff: true}
	for _, want := range []AckStatus{StatusRetry, StatusFailed, StatusFailed} {
		sent, _ = fc.apply(off, []Settlement{{Message: a, Status: StatusFailed}})
		assert.Equal(t, want, sent[0].Status)
	}

	// Rule unknown: the broker counts.
	sent, retried := fc.apply(retryRule{}, []Settlement{{Message: b, Status: StatusFailed}})
	assert.Equal(t, StatusFailed, sent[0].Status)
	assert.False(t, retried)
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

// With the queue's retryDelay known, a failure given back with retry (which
// the broker gives out again at once) waits that long in the loop before
// its ack, so the message comes back no earlier than a failed ack would
// have it; a stop ends the wait at once.
func TestConsumeHoldsFailedForRetryDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.rule = &retryRule{known: true, limit: 2, delay: 10 * time.Second}
		f.add("p", 1)
		var h failFirst
		e, _ := testEngine(t, context.Background(), f, engineConfig{each: true}, 2, h.handle)
		require.NoError(t, e.run())
		at := h.times()
		require.Len(t, at, 2)
		assert.GreaterOrEqual(t, at[1].Sub(at[0]), 10*time.Second, "the message came back before retryDelay")
		assert.Less(t, at[1].Sub(at[0]), 11*time.Second)
		assert.Equal(t, StatusRetry, f.settles()[0][0].Status)
		assert.Empty(t, f.left())
	})
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.rule = &retryRule{known: true, limit: 2, delay: time.Hour}
		f.add("p", 1)
		ctx, cancel := context.WithCancel(context.Background())
		e, _ := testEngine(t, ctx, f, engineConfig{each: true}, 0,
			func(context.Context, *Message) error { return errors.New("fails") })
		time.AfterFunc(time.Second, cancel)
		start := time.Now()
		require.NoError(t, e.run())
		assert.Less(t, time.Since(start), 2*time.Second, "the stop did not end the hold")
		require.Len(t, f.settles(), 1)
		assert.Equal(t, StatusRetry, f.settles()[0][0].Status)
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

// A settle with no failure forgets the counts of the messages it completed
// (a message that failed once and then completed in a pop of its own).
func TestFailureCounterForgetsCompleted(t *testing.T) {
	fc := newFailureCounter(10)
	m, other := &Message{PartitionID: "p", TransactionID: "a"}, &Message{PartitionID: "p", TransactionID: "b"}
	fc.failed(m)
	fc.failed(other)
	fc.settled([]Settlement{{Message: m, Status: StatusCompleted}, {Message: other, Status: StatusRetry}})
	assert.Equal(t, 0, fc.count(m))
	assert.Equal(t, 1, fc.count(other), "a retry keeps the count")
	assert.Equal(t, 1, fc.size())
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
// sent and the broker's answer: a Fail with retries left goes out as retry
// (lease released), the one past the limit as dlq (dead-lettered); outside
// the loop the outcome is the status sent (issue 21 point 6).
func TestSettleHookSaysChosenSentAnswered(t *testing.T) {
	rec := &recHook{}
	_, c := hookClient(t, nil, rec)
	_, err := c.Queue("work").Config(QueueConfig{RetryLimit: Ptr(1), RetryDelay: Ptr(time.Duration(0)), DeadLetterQueue: Ptr(true)}).Create().Execute(t.Context())
	require.NoError(t, err)
	_, err = c.Queue("work").Push(1, 2).Execute(t.Context())
	require.NoError(t, err)
	err = c.Queue("work").Batch(1).Each().Limit(2).
		Consume(t.Context(), func(context.Context, *Message) error { return errors.New("poison") }).
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
// broker's count, and in fact none: its retry and dlq ride in the pop's
// batch ack, as failed did, and the queue's settings are read once per
// loop. (A failure itself costs what it always did, about one pop and one
// ack for the rest of its partition: logged, not asserted.)
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
// over the broker's (count-req/failure: at most one, in fact about zero),
// and what a failure costs over the same messages without failures
// (extra-req/failure: the pop and ack of the rest of its partition, the
// same under both counts).
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

// Without RenewLease the hold ends by half the pops' lease (LeaseSeconds
// over the queue's leaseTime), so that the retry ack finds the lease.
func TestConsumeHoldEndsBeforeTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.rule = &retryRule{known: true, limit: 2, delay: time.Hour, lease: 300 * time.Second}
		f.add("p", 1)
		var h failFirst
		e, _ := testEngine(t, context.Background(), f, engineConfig{each: true, lease: 20 * time.Second}, 2, h.handle)
		require.NoError(t, e.run())
		at := h.times()
		require.Len(t, at, 2)
		assert.GreaterOrEqual(t, at[1].Sub(at[0]), 9*time.Second)
		assert.Less(t, at[1].Sub(at[0]), 11*time.Second, "the hold outlasted half the lease")
	})
}

// A pop of two partitions, one with a failure held for retryDelay: the
// other partition's outcomes are acked at once, the held one after the
// hold (two requests: one more than without the hold).
func TestConsumeHoldAcksOtherPartitionsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.rule = &retryRule{known: true, limit: 2, delay: 10 * time.Second}
		f.add("a", 1)
		f.add("b", 2)
		var mu sync.Mutex
		failed := false
		e, _ := testEngine(t, context.Background(), f, engineConfig{each: true}, 4,
			func(_ context.Context, m *Message) error {
				mu.Lock()
				defer mu.Unlock()
				if m.PartitionID == "a" && !failed {
					failed = true
					return errors.New("once")
				}
				return nil
			})
		require.NoError(t, e.run())
		s := f.settles()
		require.GreaterOrEqual(t, len(s), 2)
		require.Len(t, s[0], 2, "partition b's acks first")
		for _, a := range s[0] {
			assert.Equal(t, "b", a.Message.PartitionID)
			assert.Equal(t, StatusCompleted, a.Status)
		}
		require.Len(t, s[1], 1)
		assert.Equal(t, "a", s[1][0].Message.PartitionID)
		assert.Equal(t, StatusRetry, s[1][0].Status)
		assert.Empty(t, f.left())
	})
}

// Without RenewLease a hold ends by half the shorter of the pops' LeaseTime
// and the queue's lease: a 0.15.1 broker ignores the pops' and leases for
// the queue's time, so the longer one could outlast the real lease.
func TestHoldForTakesTheShorterLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rule := retryRule{known: true, delay: time.Minute, lease: 30 * time.Second}
		b := &batch{poppedAt: time.Now()}
		long := &engine{cfg: engineConfig{lease: 10 * time.Minute}}
		assert.Equal(t, 15*time.Second, long.holdFor(b, rule))
		short := &engine{cfg: engineConfig{lease: 10 * time.Second}}
		assert.Equal(t, 5*time.Second, short.holdFor(b, rule))
		none := &engine{}
		assert.Equal(t, 15*time.Second, none.holdFor(b, rule))
	})
}

// A pop held for retryDelay occupies no handler: with Concurrency(1), the
// messages of another partition, pushed when the first one failed and so
// popped later, are handled during the hold, long before retryDelay. The
// held partition stays leased meanwhile (its lease renewed under
// RenewLease), so nothing of it comes again; a stop ends the hold at once
// and sends its retry ack.
func TestConsumeHoldFreesTheHandler(t *testing.T) {
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
					time.Sleep(5 * time.Second) // a's hold goes on meanwhile
				case "b/1":
					close(bDone)
				}
				return nil
			})
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- e.run() }()
		<-bDone
		synctest.Wait() // b's ack is sent
		assert.Less(t, time.Since(start), time.Minute, "b waited for a's hold (retryDelay 1 h)")
		require.Len(t, f.settles(), 1, "only b is acked during a's hold")
		assert.Equal(t, []string{"b/0:completed", "b/1:completed"}, statuses(f.settles()))
		f.mu.Lock()
		aLease, renewed := f.leased["a"], f.renews["L1"]
		f.mu.Unlock()
		assert.Equal(t, "L1", aLease, "a's partition is not leased by its pop during the hold")
		assert.GreaterOrEqual(t, renewed, 4, "a's lease is not renewed during the hold")

		stopAt := time.Now()
		cancel()
		require.NoError(t, <-done)
		assert.Less(t, time.Since(stopAt), time.Second, "the stop did not end the hold at once")
		assert.Equal(t, []string{"b/0:completed", "b/1:completed", "a/0:retry"}, statuses(f.settles()))
		assert.Equal(t, []string{"a/0"}, f.left(), "a/0 is given back")
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []string{"a/0", "b/0", "b/1"}, handled, "a came again during its hold")
	})
}

// A held pop is not settled: it still counts against the pops the loop
// may hold (at most twice Concurrency in all, held ones included), so a
// queue whose every partition fails does not pile up held pops. With
// Concurrency(1), a and b are held, c is not popped until a hold ends.
func TestConsumeHeldPopsAreBounded(t *testing.T) {
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
		time.Sleep(time.Minute) // well within the holds
		synctest.Wait()
		f.mu.Lock()
		pops := len(f.pops)
		f.mu.Unlock()
		assert.Equal(t, 2, pops, "the loop popped while it held 2×Concurrency pops")
		mu.Lock()
		assert.Equal(t, []string{"a/0", "b/0"}, handled)
		mu.Unlock()
		assert.Empty(t, f.settles(), "a hold ended before retryDelay")
		cancel()
		require.NoError(t, <-done)
		assert.ElementsMatch(t, []string{"a/0:retry", "b/0:retry"}, statuses(f.settles()), "the stop sends both held acks, in either order")
		assert.Equal(t, []string{"a/0", "b/0", "c/0"}, f.left())
	})
}

// A lease lost during a hold (told by a renewal) ends the hold and sends
// nothing for the held partition, at once and at the stop, and the loop
// goes on.
func TestConsumeHoldLeaseLostSendsNothing(t *testing.T) {
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
		assert.Contains(t, logs.String(), "lease lost while held for retryDelay")
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
