package queen

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen/queentest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recHook implements every hook interface and records the events.
type recHook struct {
	mu       sync.Mutex
	push     []PushEvent
	pop      []PopEvent
	starts   []HandlerStart
	ends     []HandlerEnd
	settle   []SettleEvent
	renew    []RenewEvent
	lost     []LeaseLost
	requests []RequestEvent
}

func (h *recHook) OnPush(_ context.Context, e PushEvent) {
	h.mu.Lock()
	h.push = append(h.push, e)
	h.mu.Unlock()
}
func (h *recHook) OnPop(_ context.Context, e PopEvent) {
	h.mu.Lock()
	h.pop = append(h.pop, e)
	h.mu.Unlock()
}
func (h *recHook) OnHandlerStart(ctx context.Context, e HandlerStart) context.Context {
	h.mu.Lock()
	h.starts = append(h.starts, e)
	h.mu.Unlock()
	return ctx
}
func (h *recHook) OnHandlerEnd(_ context.Context, e HandlerEnd) {
	h.mu.Lock()
	h.ends = append(h.ends, e)
	h.mu.Unlock()
}
func (h *recHook) OnSettle(_ context.Context, e SettleEvent) {
	h.mu.Lock()
	h.settle = append(h.settle, e)
	h.mu.Unlock()
}
func (h *recHook) OnRenew(_ context.Context, e RenewEvent) {
	h.mu.Lock()
	h.renew = append(h.renew, e)
	h.mu.Unlock()
}
func (h *recHook) OnLeaseLost(_ context.Context, e LeaseLost) {
	h.mu.Lock()
	h.lost = append(h.lost, e)
	h.mu.Unlock()
}
func (h *recHook) OnRequest(_ context.Context, e RequestEvent) {
	h.mu.Lock()
	h.requests = append(h.requests, e)
	h.mu.Unlock()
}

// hookClient returns a queentest broker and a client with hooks.
func hookClient(t *testing.T, opts []Option, hooks ...Hook) (*queentest.Server, *Client) {
	t.Helper()
	srv := queentest.Start(t)
	base := []Option{WithHooks(hooks...), WithRetryPolicy(RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})}
	c, err := New(srv.URL, append(base, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return srv, c
}

// popAll pops up to 10 messages of queue for group without waiting.
func popAll(t *testing.T, c *Client, queue, group string) []*Message {
	t.Helper()
	msgs, err := c.Queue(queue).Group(group).SubscriptionMode(SubscriptionModeAll).Wait(false).Batch(10).Pop(t.Context())
	require.NoError(t, err)
	return msgs
}

func TestWithHooksRefusesAValueThatIsNoHook(t *testing.T) {
	_, err := New("http://localhost:6632", WithHooks(&recHook{}, 42))
	require.ErrorIs(t, err, ErrInvalidOption)
	assert.Contains(t, err.Error(), "hook 1 (int)")
	_, err = New("http://localhost:6632", WithHooks(&recHook{}), WithHooks(&recHook{}))
	require.NoError(t, err)
}

func TestPushHook(t *testing.T) {
	h := &recHook{}
	srv, c := hookClient(t, []Option{WithRetryPolicy(RetryPolicy{MaxAttempts: 1})}, h)

	res, err := c.Queue("orders").Partition("eu").Push(map[string]any{"n": 1}, map[string]any{"n": 2}).Execute(t.Context())
	require.NoError(t, err)
	// Synchronous: the event is there when Execute returns.
	require.Len(t, h.push, 1)
	e := h.push[0]
	assert.Equal(t, "orders", e.Queue)
	assert.Equal(t, "eu", e.Partition)
	assert.Equal(t, 2, e.Count)
	assert.Equal(t, res, e.Results)
	assert.NoError(t, e.Err)
	assert.Positive(t, e.Duration)

	// A push refused before the wire is no push: no event.
	_, err = c.Queue("orders").Push().Execute(t.Context())
	require.Error(t, err)
	assert.Len(t, h.push, 1)

	// A failed push reports its error.
	srv.FailNext(queentest.RoutePush, 1, http.StatusBadRequest, 0)
	_, err = c.Queue("orders").Push(1).Execute(t.Context())
	require.Error(t, err)
	require.Len(t, h.push, 2)
	assert.Equal(t, err, h.push[1].Err)
	assert.Nil(t, h.push[1].Results)
	assert.Equal(t, 1, h.push[1].Count)
}

func TestPopHook(t *testing.T) {
	h := &recHook{}
	_, c := hookClient(t, nil, h)
	_, err := c.Queue("jobs").Push(1, 2, 3).Execute(t.Context())
	require.NoError(t, err)

	msgs := popAll(t, c, "jobs", "workers")
	require.Len(t, msgs, 3)
	require.Len(t, h.pop, 1)
	e := h.pop[0]
	assert.Equal(t, "jobs", e.Queue)
	assert.Equal(t, "workers", e.Group)
	assert.Empty(t, e.Partition)
	assert.Equal(t, msgs, e.Messages)
	assert.Zero(t, e.Wait)
	assert.NoError(t, e.Err)

	// A long poll reports its wait; an empty pop has no messages.
	msgs, err = c.Queue("jobs").Group("workers").Wait(true).TimeoutMillis(50).Pop(t.Context())
	require.NoError(t, err)
	require.Empty(t, msgs)
	require.Len(t, h.pop, 2)
	assert.Equal(t, 50*time.Millisecond, h.pop[1].Wait)
	assert.Empty(t, h.pop[1].Messages)
	assert.GreaterOrEqual(t, h.pop[1].Duration, 40*time.Millisecond)
}

func TestRequestHookReportsEveryAttempt(t *testing.T) {
	h := &recHook{}
	srv, c := hookClient(t, []Option{WithRetryPolicy(RetryPolicy{MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})}, h)
	srv.FailNext(queentest.RoutePush, 1, http.StatusServiceUnavailable, 0)
	_, err := c.Queue("orders").Push(1).Execute(t.Context())
	require.NoError(t, err)
	msgs := popAll(t, c, "orders", "g")
	require.Len(t, msgs, 1)
	_, err = c.Ack(t.Context(), msgs[0], true, AckOptions{})
	require.NoError(t, err)

	require.Len(t, h.requests, 5)
	type row struct {
		Method, Route string
		Attempt       int
		Status        int
	}
	var got []row
	for _, e := range h.requests {
		got = append(got, row{e.Method, e.Route, e.Attempt, e.Status})
		assert.NoError(t, e.Err)
		assert.Equal(t, srv.URL, e.URL)
		assert.Positive(t, e.Duration)
	}
	assert.Equal(t, []row{
		{"POST", "/api/v1/push", 1, 503},
		{"POST", "/api/v1/push", 2, 201},
		{"GET", "/health", 1, 200}, // a group's first pop asks the broker's generation
		{"GET", "/api/v1/pop/queue/{queue}", 1, 200},
		{"POST", "/api/v1/ack", 1, 200},
	}, got)
	assert.Equal(t, "/api/v1/pop/queue/orders", h.requests[3].Path)
}

func TestRequestHookReportsAnAttemptWithoutAnswer(t *testing.T) {
	h := &recHook{}
	c, err := New("http://127.0.0.1:1", WithHooks(h), WithRetryPolicy(RetryPolicy{MaxAttempts: 2, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}))
	require.NoError(t, err)
	defer c.Close(t.Context())
	_, err = c.Admin().Health(t.Context())
	require.Error(t, err)
	require.Len(t, h.requests, 2)
	for i, e := range h.requests {
		assert.Equal(t, i+1, e.Attempt)
		assert.Equal(t, "/health", e.Route)
		assert.Zero(t, e.Status)
		assert.Error(t, e.Err)
	}
}

func TestSettleHook(t *testing.T) {
	h := &recHook{}
	_, c := hookClient(t, nil, h)
	_, err := c.Queue("q").Push(1, 2, 3, 4).Execute(t.Context())
	require.NoError(t, err)
	msgs := popAll(t, c, "q", "g")
	require.Len(t, msgs, 4)

	acks := []Settlement{
		{Message: msgs[0], Status: StatusCompleted},
		{Message: msgs[1], Status: StatusCompleted},
		{Message: msgs[2], Status: StatusDLQ, Error: "bad"},
		{Message: msgs[3], Status: StatusRetry},
	}
	_, err = c.SettleBatch(t.Context(), acks, AckOptions{})
	require.NoError(t, err)
	require.Len(t, h.settle, 1)
	e := h.settle[0]
	assert.Equal(t, "g", e.Group)
	assert.Equal(t, acks, e.Settlements)
	assert.Equal(t, 2, e.Count(StatusCompleted))
	assert.Equal(t, 1, e.Count(StatusDLQ))
	assert.Equal(t, 1, e.Count(StatusRetry))
	assert.Equal(t, 0, e.Count(StatusFailed))
	assert.Zero(t, e.Refused)
	assert.NoError(t, e.Err)

	// Acking again: the lease is gone, the broker refuses.
	_, err = c.Ack(t.Context(), msgs[0], false, AckOptions{})
	var ae *AckError
	require.ErrorAs(t, err, &ae)
	require.Len(t, h.settle, 2)
	assert.Equal(t, 1, h.settle[1].Refused)
	assert.Equal(t, 1, h.settle[1].Count(StatusFailed))
	assert.Equal(t, err, h.settle[1].Err)

	// Refused before the wire: no event.
	_, err = c.SettleBatch(t.Context(), nil, AckOptions{})
	require.ErrorIs(t, err, ErrNoMessages)
	assert.Len(t, h.settle, 2)
}

func TestRenewAndLeaseLostHooks(t *testing.T) {
	h := &recHook{}
	_, c := hookClient(t, nil, h)
	_, err := c.Queue("r").Push(1).Execute(t.Context())
	require.NoError(t, err)
	msgs := popAll(t, c, "r", "g")
	require.Len(t, msgs, 1)

	res, err := c.RenewFor(t.Context(), 90*time.Second, msgs...)
	require.NoError(t, err)
	require.Len(t, h.renew, 1)
	e := h.renew[0]
	assert.Equal(t, RenewEvent{Queue: "r", Group: "g", LeaseID: msgs[0].LeaseID, Extension: 90 * time.Second,
		Result: res[0], Duration: e.Duration, Err: nil}, e)
	assert.True(t, e.Result.Success)
	assert.Empty(t, h.lost)

	// Settled, the lease is released: the next renewal finds it lost.
	_, err = c.Ack(t.Context(), msgs[0], true, AckOptions{})
	require.NoError(t, err)
	_, err = c.Renew(t.Context(), msgs...)
	require.ErrorIs(t, err, ErrLeaseLost)
	require.Len(t, h.renew, 2)
	assert.False(t, h.renew[1].Result.Success)
	require.Len(t, h.lost, 1)
	assert.Equal(t, LeaseLost{Queue: "r", Group: "g", LeaseID: msgs[0].LeaseID, Reason: h.renew[1].Result.Error}, h.lost[0])
}

// panicHook panics in every hook method.
type panicHook struct{}

func (panicHook) OnPush(context.Context, PushEvent) { panic("push boom") }
func (panicHook) OnPop(context.Context, PopEvent)   { panic("pop boom") }
func (panicHook) OnHandlerStart(context.Context, HandlerStart) context.Context {
	panic("start boom")
}
func (panicHook) OnHandlerEnd(context.Context, HandlerEnd) { panic("end boom") }
func (panicHook) OnSettle(context.Context, SettleEvent)    { panic("settle boom") }
func (panicHook) OnRenew(context.Context, RenewEvent)      { panic("renew boom") }
func (panicHook) OnLeaseLost(context.Context, LeaseLost)   { panic("lost boom") }
func (panicHook) OnRequest(context.Context, RequestEvent)  { panic("request boom") }

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestPanickingHookIsRecoveredAndLoggedOncePerKind(t *testing.T) {
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	after := &recHook{}
	_, c := hookClient(t, []Option{WithLogger(log)}, panicHook{}, after)

	for range 2 {
		_, err := c.Queue("p").Push(1).Execute(t.Context())
		require.NoError(t, err)
		msgs := popAll(t, c, "p", "g")
		require.Len(t, msgs, 1)
		_, err = c.Renew(t.Context(), msgs...)
		require.NoError(t, err)
		_, err = c.Ack(t.Context(), msgs[0], true, AckOptions{})
		require.NoError(t, err)
		_, err = c.Renew(t.Context(), msgs...) // lost now
		require.ErrorIs(t, err, ErrLeaseLost)
	}
	// The hook after the panicking one saw every event.
	assert.Len(t, after.push, 2)
	assert.Len(t, after.pop, 2)
	assert.Len(t, after.settle, 2)
	assert.Len(t, after.renew, 4)
	assert.Len(t, after.lost, 2)
	assert.Len(t, after.requests, 11) // the group lookup once, then 5 requests per round

	out := logs.String()
	for _, m := range []string{"OnPush", "OnPop", "OnSettle", "OnRenew", "OnLeaseLost", "OnRequest"} {
		assert.Equal(t, 1, strings.Count(out, "method="+m), "panics of %s logged once", m)
	}
	assert.Equal(t, 6, strings.Count(out, "level=ERROR"))
	assert.Contains(t, out, `panic="push boom"`)
	assert.Contains(t, out, "hook=\"0 (queen.panicHook)\"")
}

func TestHandlerHookHelpers(t *testing.T) {
	logs := &lockedBuffer{}
	hs, err := newHookSet([]Hook{panicHook{}, ctxHook{}, &recHook{}}, slog.New(slog.NewTextHandler(logs, nil)))
	require.NoError(t, err)
	rec := hs.handler[2].h.(*recHook)
	msgs := []*Message{{TransactionID: "t1"}, {TransactionID: "t2"}}

	ctx, turn := hs.handlerStart(context.Background(), "q", "g", msgs)
	// The panicking hook left ctx alone; the next one derived from it.
	assert.Equal(t, "ctxHook", ctx.Value(ctxKey{}))
	outcomes := []Outcome{Complete(), Fail(errors.New("x"))}
	hs.handlerEnd(ctx, turn, errors.New("x"), outcomes, false)
	outcomes[0] = Retry() // the caller may reuse its slice

	require.Len(t, rec.starts, 1)
	assert.Equal(t, HandlerStart{Queue: "q", Group: "g", Messages: msgs}, rec.starts[0])
	require.Len(t, rec.ends, 1)
	e := rec.ends[0]
	assert.Equal(t, []Outcome{Complete(), Fail(errors.New("x"))}, e.Outcomes)
	assert.EqualError(t, e.Err, "x")
	assert.Equal(t, msgs, e.Messages)
	assert.False(t, e.LeaseLost)
	assert.Equal(t, 1, strings.Count(logs.String(), "method=OnHandlerStart"))
	assert.Equal(t, 1, strings.Count(logs.String(), "method=OnHandlerEnd"))
}

type ctxKey struct{}

// ctxHook derives the handler's ctx.
type ctxHook struct{}

func (ctxHook) OnHandlerStart(ctx context.Context, _ HandlerStart) context.Context {
	return context.WithValue(ctx, ctxKey{}, "ctxHook")
}
func (ctxHook) OnHandlerEnd(ctx context.Context, _ HandlerEnd) {}

// TestNoHooksCostNothing pins that without WithHooks the call sites build
// nothing: no allocation, no clock read (the zero time).
func TestNoHooksCostNothing(t *testing.T) {
	var hs *hookSet
	msgs := []*Message{{}}
	ctx := context.Background()
	acks := []Settlement{{Message: msgs[0], Status: StatusCompleted}}
	allocs := testing.AllocsPerRun(100, func() {
		start := hs.now()
		if !start.IsZero() {
			panic("clock read without hooks")
		}
		hs.pushed(ctx, "q", "", 1, start, nil, nil)
		hs.popped(ctx, "q", "", "g", 0, start, msgs, nil)
		hctx, turn := hs.handlerStart(ctx, "q", "g", msgs)
		hs.handlerEnd(hctx, turn, nil, []Outcome{Complete()}, false)
		hs.settled(ctx, "g", nil, acks, nil, start, nil)
		hs.renewed(ctx, "q", "g", "l", time.Second, start, RenewResult{}, nil)
	})
	assert.Zero(t, allocs)
	assert.Nil(t, hs.onAttempt())
}

func TestRouteOf(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/push":                            "/api/v1/push",
		"/api/v1/pop/queue/orders":                "/api/v1/pop/queue/{queue}",
		"/api/v1/pop/queue/a%2Fb/partition/eu":    "/api/v1/pop/queue/{queue}/partition/{partition}",
		"/api/v1/pop":                             "/api/v1/pop",
		"/api/v1/ack/batch":                       "/api/v1/ack/batch",
		"/api/v1/lease/l-1/extend":                "/api/v1/lease/{leaseId}/extend",
		"/api/v1/consumer-groups/g/queues/q/seek": "/api/v1/consumer-groups/{group}/queues/{queue}/seek",
		"/api/v1/consumer-groups/g":               "/api/v1/consumer-groups/{group}",
		"/api/v1/consumer-groups":                 "/api/v1/consumer-groups",
		"/api/v1/resources/queues/q":              "/api/v1/resources/queues/{queue}",
		"/api/v1/dlq/x/replay":                    "/api/v1/dlq/{id}/replay",
		"/health":                                 "/health",
		"/api/v1/unknown/route":                   "other",
	} {
		assert.Equal(t, want, routeOf(path), path)
	}
}

// blockingHook blocks in OnPush until release is closed.
type blockingHook struct {
	entered chan struct{}
	release chan struct{}
}

func (h *blockingHook) OnPush(context.Context, PushEvent) {
	close(h.entered)
	<-h.release
}

// TestBlockingHookBlocksTheCaller pins the documented contract: hooks run
// on the caller's goroutine, so Execute does not return while a hook
// blocks, and returns once it does.
func TestBlockingHookBlocksTheCaller(t *testing.T) {
	h := &blockingHook{entered: make(chan struct{}), release: make(chan struct{})}
	_, c := hookClient(t, nil, h)
	done := make(chan error, 1)
	go func() {
		_, err := c.Queue("b").Push(1).Execute(context.Background())
		done <- err
	}()
	<-h.entered
	select {
	case err := <-done:
		t.Fatalf("Execute returned (%v) while its hook was blocked", err)
	default:
	}
	close(h.release)
	require.NoError(t, <-done)
}

// TestConsumeCallsHooks runs a consume loop with hooks: the handler gets
// the ctx OnHandlerStart derived, each message has its HandlerEnd with
// its outcome, and the pop's settlement and pops are reported.
func TestConsumeCallsHooks(t *testing.T) {
	rec := &recHook{}
	_, c := hookClient(t, nil, ctxHook{}, rec)
	_, err := c.Queue("work").Push(1, 2, 3).Execute(t.Context())
	require.NoError(t, err)

	errBad := errors.New("bad")
	var seen []any
	err = c.Queue("work").Group("g").SubscriptionMode(SubscriptionModeAll).Batch(3).Each().Limit(3).
		Consume(t.Context(), func(ctx context.Context, m *Message) error {
			seen = append(seen, ctx.Value(ctxKey{}))
			if string(m.Raw) == "3" {
				return errBad
			}
			return nil
		}).
		OnError(func(ctx context.Context, m *Message, err error) Outcome { return DLQ(err) }).
		Execute(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []any{"ctxHook", "ctxHook", "ctxHook"}, seen)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.starts, 3)
	require.Len(t, rec.ends, 3)
	for i, e := range rec.ends {
		assert.Equal(t, "work", e.Queue)
		assert.Equal(t, "g", e.Group)
		require.Len(t, e.Messages, 1)
		assert.Equal(t, rec.starts[i].Messages, e.Messages)
		assert.False(t, e.LeaseLost)
	}
	assert.Equal(t, []Outcome{Complete()}, rec.ends[0].Outcomes)
	assert.Equal(t, []Outcome{Complete()}, rec.ends[1].Outcomes)
	assert.Equal(t, []Outcome{DLQ(errBad)}, rec.ends[2].Outcomes)
	assert.Equal(t, errBad, rec.ends[2].Err)

	// One event per ack request: how many depends on how the outcomes met
	// the sender (acks go as work completes); together they settle all
	// three.
	require.NotEmpty(t, rec.settle)
	completed, dlq := 0, 0
	for _, s := range rec.settle {
		assert.Equal(t, "g", s.Group)
		assert.NoError(t, s.Err)
		completed += s.Count(StatusCompleted)
		dlq += s.Count(StatusDLQ)
	}
	assert.Equal(t, 2, completed)
	assert.Equal(t, 1, dlq)

	require.NotEmpty(t, rec.pop)
	assert.Equal(t, "work", rec.pop[0].Queue)
	assert.Equal(t, "g", rec.pop[0].Group)
	assert.Len(t, rec.pop[0].Messages, 3)
}

// TestConsumeBatchCallsHooks: a batch handler is one handler call with
// the whole pop and one outcome per message.
func TestConsumeBatchCallsHooks(t *testing.T) {
	rec := &recHook{}
	_, c := hookClient(t, nil, rec)
	_, err := c.Queue("batch").Push(1, 2).Execute(t.Context())
	require.NoError(t, err)
	err = c.Queue("batch").Group("g").SubscriptionMode(SubscriptionModeAll).Batch(2).Limit(2).
		ConsumeBatch(t.Context(), func(ctx context.Context, msgs []*Message) error { return nil }).
		Execute(t.Context())
	require.NoError(t, err)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.ends, 1)
	assert.Len(t, rec.ends[0].Messages, 2)
	assert.Equal(t, []Outcome{Complete(), Complete()}, rec.ends[0].Outcomes)
	require.Len(t, rec.settle, 1)
	assert.Equal(t, 2, rec.settle[0].Count(StatusCompleted))
}
