package queen_test

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// answers names which of "surely not applied" (ErrNotSent) and "may have
// been applied" (ErrOutcomeUnknown) err matches.
func answers(err error) string {
	switch ns, ou := errors.Is(err, queen.ErrNotSent), errors.Is(err, queen.ErrOutcomeUnknown); {
	case ns && ou:
		return "both"
	case ns:
		return "not sent"
	case ou:
		return "unknown"
	}
	return "neither"
}

// The case of issue 37: a broker answering 500 to every push, a delivery
// timeout of 50 ms. The batch on the wire fails with ErrDeliveryTimeout
// and ErrOutcomeUnknown (a 500 may follow applying); the message buffered
// behind it was never sent: ErrNotSent alone, though errors.Is and
// errors.As still find why (ErrDeliveryTimeout, the batch's *BrokerError).
// On the bubble's clock; the gate holds the first push until the second
// message is buffered behind it.
func TestProducerErrorsAnswerOnce(t *testing.T) {
	srv := queentest.NewServer()
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		c, rt := outageClient(t, srv)
		defer c.Close(context.Background())
		rt.gate = make(chan struct{})
		srv.FailNext(queentest.RoutePush, 1000, http.StatusInternalServerError, 0)
		p, err := c.Queue("answers").Producer(queen.WithDeliveryTimeout(50 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		first := p.Push(ctx, payload(1))
		synctest.Wait() // its batch is on the wire, held at the gate
		behind := p.Push(ctx, payload(2))
		flushed := make(chan error)
		go func() { flushed <- p.Flush(ctx) }()
		synctest.Wait() // Flush waits for both
		close(rt.gate)
		flushErr := <-flushed

		err = waitErr(first)
		var be *queen.BrokerError
		if got := answers(err); got != "unknown" || !errors.Is(err, queen.ErrDeliveryTimeout) ||
			!errors.As(err, &be) || be.Status != http.StatusInternalServerError {
			t.Errorf("the batch: %v (answers %s)", err, got)
		}
		err = waitErr(behind)
		var pf *queen.PartitionFailedError
		if got := answers(err); got != "not sent" || !errors.As(err, &pf) || !errors.Is(err, queen.ErrDeliveryTimeout) ||
			!errors.As(err, &be) || be.Status != http.StatusInternalServerError {
			t.Errorf("the message behind it: %v (answers %s)", err, got)
		}
		if pf != nil && answers(pf.Cause) != "unknown" {
			t.Errorf("the cause, the batch's failure, answers %s", answers(pf.Cause))
		}
		if first.State() != queen.PushUnknown || behind.State() != queen.PushNotStored {
			t.Errorf("states: the batch %v, the message behind %v", first.State(), behind.State())
		}
		// Flush's error says which message is which, and answers for them
		// all: one may have been stored.
		var pe *queen.ProducerError
		if got := answers(flushErr); got != "unknown" || !errors.As(flushErr, &pe) || !errors.As(flushErr, &be) {
			t.Fatalf("Flush: %v (answers %s)", flushErr, got)
		}
		if len(pe.Unknown) != 1 || pe.Unknown[0] != first || len(pe.NotStored) != 1 || pe.NotStored[0] != behind || len(pe.Pending) != 0 {
			t.Errorf("Flush: unknown %v, not stored %v, pending %v", pe.Unknown, pe.NotStored, pe.Pending)
		}
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// fault is how faulty fails the requests it is set to fail.
type fault struct {
	name   string
	status int   // an answer of this status, with the broker's envelope
	err    error // no answer: this error
	body   string
	// then, when set, is how the requests after the first fail.
	then *fault
	// method, when set, narrows the requests failed to that method; pass
	// lets that many of them through first.
	method string
	pass   int
	// want is the answer of a call's error: for calls sent at most once
	// (a pop, a commit, a replay) and for the others; "" for any one.
	wantOnce, want string
}

var (
	refusedErr = &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	faults     = []fault{
		{name: "refused", err: refusedErr, wantOnce: "not sent", want: "not sent"},
		// EOF after the request went out (a RoundTripper without
		// connection events: only a dial error says "not sent").
		{name: "hang up", err: io.EOF, wantOnce: "unknown", want: "unknown"},
		// A 500 may follow applying, whatever the call.
		{name: "500", status: http.StatusInternalServerError, wantOnce: "unknown", want: "unknown"},
		{name: "503", status: http.StatusServiceUnavailable, wantOnce: "neither", want: "neither"},
		{name: "400", status: http.StatusBadRequest, wantOnce: "neither", want: "neither"},
		// A 2xx was applied; what came of it, the client cannot read.
		{name: "200 garbage", status: http.StatusOK, body: "<html>", wantOnce: "unknown", want: "unknown"},
		// The first attempt may have been applied: a later refusal does not
		// take that back (a call sent once is not sent again).
		{name: "hang up, then 503", err: io.EOF, then: &fault{status: http.StatusServiceUnavailable},
			wantOnce: "unknown", want: "unknown"},
		{name: "hang up, then 400", err: io.EOF, then: &fault{status: http.StatusBadRequest},
			wantOnce: "unknown", want: "unknown"},
	}
)

// faulty is a RoundTripper for a synctest bubble: it serves each request
// with srv's handler on the caller's goroutine, but fails those whose path
// starts with path as f says.
type faulty struct {
	srv  *queentest.Server
	mu   sync.Mutex
	path string
	f    *fault
	hits int           // requests failed since set
	gate chan struct{} // when set, holds the failing requests until closed
}

func (rt *faulty) set(path string, f *fault) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.path, rt.f, rt.hits = path, f, 0
}

func (rt *faulty) RoundTrip(req *http.Request) (*http.Response, error) {
	rt.mu.Lock()
	f, gate := rt.f, rt.gate
	if rt.path == "" || !strings.HasPrefix(req.URL.Path, rt.path) || (f != nil && f.method != "" && f.method != req.Method) {
		f = nil
	}
	if f != nil && f.pass > 0 {
		f = &fault{pass: f.pass - 1, method: f.method, then: f.then, err: f.err, status: f.status, body: f.body, name: f.name}
		rt.f, f = f, nil
	}
	if f != nil {
		if rt.hits > 0 && f.then != nil {
			f = f.then
		}
		rt.hits++
	}
	rt.mu.Unlock()
	if req.Body == nil {
		req.Body = http.NoBody
	}
	if f != nil {
		_, _ = io.Copy(io.Discard, req.Body)
	}
	if f != nil && gate != nil {
		<-gate
	}
	switch {
	case f != nil && f.err != nil:
		return nil, f.err
	case f != nil:
		body := cmp.Or(f.body, `{"error":"injected `+strconv.Itoa(f.status)+`"}`)
		return &http.Response{StatusCode: f.status, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req}, nil
	}
	rec := httptest.NewRecorder()
	rt.srv.ServeHTTP(rec, req)
	res := rec.Result()
	res.Request = req
	return res, nil
}

// checkAnswer fails the test unless err matches at most one of ErrNotSent
// and ErrOutcomeUnknown, and want ("" for any).
func checkAnswer(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	if got := answers(err); got == "both" || (want != "" && got != want) {
		t.Errorf("%s: %v\n\tanswers %s, want %s", what, err, got, cmp.Or(want, "at most one"))
	}
}

// plainCall is one call of the client's API outside a consume loop and a
// producer, on a queue of its own with a leased message of it.
type plainCall struct {
	name string
	path string // the route prefix the fault hits
	once bool   // sent at most once when it may have been applied
	do   func(ctx context.Context, c *queen.Client, queue string, msg *queen.Message) error
	// anyAnswer: only "at most one" is checked (a wait that outlives
	// passing failures and ends with its ctx).
	anyAnswer bool
}

var plainCalls = []plainCall{
	{name: "push", path: "/api/v1/push", once: false, do: func(ctx context.Context, c *queen.Client, q string, _ *queen.Message) error {
		_, err := c.Queue(q).Push(1).Execute(ctx)
		return err
	}},
	{name: "pop", path: "/api/v1/pop", once: true, do: func(ctx context.Context, c *queen.Client, q string, _ *queen.Message) error {
		_, err := c.Queue(q).Wait(false).Pop(ctx)
		return err
	}},
	{name: "pop of a group", path: "/api/v1/pop", once: true, do: func(ctx context.Context, c *queen.Client, q string, _ *queen.Message) error {
		_, err := c.Queue(q).Group("g").Wait(false).Pop(ctx)
		return err
	}},
	{name: "ack", path: "/api/v1/ack", once: false, do: func(ctx context.Context, c *queen.Client, _ string, m *queen.Message) error {
		_, err := c.Ack(ctx, m, true, queen.AckOptions{})
		return err
	}},
	{name: "settle batch", path: "/api/v1/ack", once: false, do: func(ctx context.Context, c *queen.Client, _ string, m *queen.Message) error {
		_, err := c.SettleBatch(ctx, []queen.Settlement{{Message: m, Status: queen.StatusRetry}}, queen.AckOptions{})
		return err
	}},
	{name: "renew", path: "/api/v1/lease", once: false, do: func(ctx context.Context, c *queen.Client, _ string, m *queen.Message) error {
		_, err := c.Renew(ctx, m)
		return err
	}},
	{name: "commit", path: "/api/v1/transaction", once: true, do: func(ctx context.Context, c *queen.Client, q string, m *queen.Message) error {
		_, err := c.Transaction().Queue(q).Push(2).Ack(m, queen.StatusCompleted).Commit(ctx)
		return err
	}},
	{name: "fetch", path: "/api/v1/fetch", once: false, do: func(ctx context.Context, c *queen.Client, q string, _ *queen.Message) error {
		_, err := c.Queue(q).Fetch(ctx, []string{"Default"})
		return err
	}},
	{name: "create", path: "/api/v1/configure", once: false, do: func(ctx context.Context, c *queen.Client, q string, _ *queen.Message) error {
		_, err := c.Queue(q).Create().Execute(ctx)
		return err
	}},
	{name: "delete", path: "/api/v1/resources/queues", once: false, do: func(ctx context.Context, c *queen.Client, q string, _ *queen.Message) error {
		_, err := c.Queue(q).Delete().Execute(ctx)
		return err
	}},
	{name: "list queues", path: "/api/v1/resources/queues", once: false, do: func(ctx context.Context, c *queen.Client, _ string, _ *queen.Message) error {
		_, err := c.Admin().ListQueues(ctx)
		return err
	}},
	{name: "get queue", path: "/api/v1/resources/queues", once: false, do: func(ctx context.Context, c *queen.Client, q string, _ *queen.Message) error {
		_, err := c.Admin().GetQueue(ctx, q)
		return err
	}},
	{name: "health", path: "/health", once: false, do: func(ctx context.Context, c *queen.Client, _ string, _ *queen.Message) error {
		_, err := c.Admin().Health(ctx)
		return err
	}},
	{name: "list dead letters", path: "/api/v1/dlq", once: false, do: func(ctx context.Context, c *queen.Client, q string, _ *queen.Message) error {
		_, err := c.Admin().ListDLQ(ctx, q, queen.DLQListOptions{})
		return err
	}},
	{name: "replay", path: "/api/v1/dlq", once: true, do: func(ctx context.Context, c *queen.Client, q string, _ *queen.Message) error {
		_, err := c.Admin().ReplayDLQ(ctx, queen.DeadLetter{ID: "1", Queue: q})
		return err
	}},
	{name: "replay dead letters", path: "/api/v1/dlq", do: func(ctx context.Context, c *queen.Client, q string, _ *queen.Message) error {
		_, err := c.Admin().ReplayDeadLetters(ctx, q, queen.DLQListOptions{})
		return err
	}},
	{name: "delete dead letter", path: "/api/v1/messages", do: func(ctx context.Context, c *queen.Client, _ string, m *queen.Message) error {
		_, err := c.Admin().DeleteDeadLetter(ctx, queen.DeadLetter{PartitionID: m.PartitionID, TransactionID: m.TransactionID})
		return err
	}},
	{name: "purge dead letters", path: "/api/v1/dlq", do: func(ctx context.Context, c *queen.Client, q string, _ *queen.Message) error {
		_, err := c.Admin().PurgeDLQ(ctx, q, "")
		return err
	}},
	{name: "lag", path: "/api/v1/resources/queues", do: func(ctx context.Context, c *queen.Client, q string, _ *queen.Message) error {
		_, err := c.Admin().Lag(ctx, q, "g")
		return err
	}},
	{name: "await drained", path: "/api/v1/resources/queues", anyAnswer: true, do: func(ctx context.Context, c *queen.Client, q string, _ *queen.Message) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := c.Admin().AwaitDrained(ctx, q, "g", queen.DrainOptions{})
		return err
	}},
	{name: "list groups", path: "/api/v1/consumer-groups", once: false, do: func(ctx context.Context, c *queen.Client, _ string, _ *queen.Message) error {
		_, err := c.Admin().ListConsumerGroups(ctx)
		return err
	}},
	{name: "get group", path: "/api/v1/consumer-groups", once: false, do: func(ctx context.Context, c *queen.Client, _ string, _ *queen.Message) error {
		_, err := c.Admin().GetConsumerGroup(ctx, "g")
		return err
	}},
	{name: "seek group", path: "/api/v1/consumer-groups", once: false, do: func(ctx context.Context, c *queen.Client, q string, _ *queen.Message) error {
		_, err := c.Admin().SeekConsumerGroup(ctx, "g", q, queen.SeekConsumerGroupOptions{ToEnd: true})
		return err
	}},
	{name: "delete group", path: "/api/v1/consumer-groups", once: false, do: func(ctx context.Context, c *queen.Client, _ string, _ *queen.Message) error {
		_, err := c.Admin().DeleteConsumerGroup(ctx, "g", queen.DeleteConsumerGroupOptions{})
		return err
	}},
}

// leasedMessage pushes one message to queue and pops it (leased, queue
// mode).
func leasedMessage(t *testing.T, c *queen.Client, queue string) *queen.Message {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Queue(queue).Push(0).Execute(ctx); err != nil {
		t.Fatal(err)
	}
	msgs, err := c.Queue(queue).Wait(false).Pop(ctx)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("pop: %v %v", msgs, err)
	}
	return msgs[0]
}

// Every error the client returns answers "was it applied?" at most once:
// it does not match both ErrNotSent and ErrOutcomeUnknown, and it matches
// the one the failure says where it is known. Over every call of the API,
// the producer's messages and Flush, and the consume loop's *LoopError,
// each against a broker that refuses connections, hangs up, answers 500,
// 503, 400 or an undecodable 200; and on a closed client or an ended ctx.
// On the bubble's clock: the retries' waits take no time.
func TestEveryErrorAnswersOnce(t *testing.T) {
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			srv := queentest.NewServer()
			synctest.Test(t, func(t *testing.T) {
				defer srv.Close()
				rt := &faulty{srv: srv}
				c, err := queen.New(srv.URL, queen.WithHTTPClient(&http.Client{Transport: rt}),
					queen.WithLogger(slog.New(slog.DiscardHandler)))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close(context.Background())
				for i, call := range plainCalls {
					q := "q" + strconv.Itoa(i)
					msg := leasedMessage(t, c, q)
					rt.set(call.path, &f)
					err := call.do(context.Background(), c, q, msg)
					rt.set("", nil)
					want := f.want
					switch {
					case call.anyAnswer:
						want = ""
					case call.once:
						want = f.wantOnce
					}
					checkAnswer(t, call.name, err, want)
				}
				producerAnswers(t, c, rt, &f)
				loopAnswers(t, c, rt, &f)
			})
		})
	}
	t.Run("closed client or ended ctx", func(t *testing.T) {
		srv := queentest.NewServer()
		synctest.Test(t, func(t *testing.T) {
			defer srv.Close()
			rt := &faulty{srv: srv}
			c, err := queen.New(srv.URL, queen.WithHTTPClient(&http.Client{Transport: rt}),
				queen.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			var msgs []*queen.Message
			for i := range plainCalls {
				msgs = append(msgs, leasedMessage(t, c, "q"+strconv.Itoa(i)))
			}
			ended, cancel := context.WithCancel(context.Background())
			cancel()
			for i, call := range plainCalls {
				checkAnswer(t, call.name+" with an ended ctx", call.do(ended, c, "q"+strconv.Itoa(i), msgs[i]), "not sent")
			}
			p, err := c.Producer()
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			checkAnswer(t, "push to a closed producer", waitErr(p.Queue("q").Push(context.Background(), 1)), "not sent")
			if err := c.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			for i, call := range plainCalls {
				err := call.do(context.Background(), c, "q"+strconv.Itoa(i), msgs[i])
				checkAnswer(t, call.name+" on a closed client", err, "not sent")
				if !errors.Is(err, queen.ErrClosed) {
					t.Errorf("%s on a closed client: %v", call.name, err)
				}
			}
			err = c.Queue("q").Consume(context.Background(), func(context.Context, *queen.Message) error { return nil }).Execute(context.Background())
			checkAnswer(t, "consume on a closed client", err, "")
		})
	})
}

// producerAnswers checks the errors of a producer whose pushes fail as f
// says: the batch on the wire (sent until a short delivery timeout), the
// message buffered behind it, Flush's *ProducerError, and each message's
// State; then, with WithPauseOnFailure, a push to the paused partition.
func producerAnswers(t *testing.T, c *queen.Client, rt *faulty, f *fault) {
	t.Helper()
	ctx := context.Background()
	for _, pause := range []bool{false, true} {
		opts := []queen.ProducerOption{queen.WithDeliveryTimeout(50 * time.Millisecond)}
		if pause {
			opts = append(opts, queen.WithPauseOnFailure())
		}
		p, err := c.Queue("produced").Producer(opts...)
		if err != nil {
			t.Fatal(err)
		}
		rt.mu.Lock()
		rt.gate = make(chan struct{})
		rt.mu.Unlock()
		rt.set("/api/v1/push", f)
		first := p.Push(ctx, 1)
		synctest.Wait() // its batch is held at the gate
		behind := p.Push(ctx, 2)
		flushed := make(chan error)
		go func() { flushed <- p.Flush(ctx) }()
		synctest.Wait() // Flush waits for both
		rt.mu.Lock()
		close(rt.gate)
		rt.gate = nil
		rt.mu.Unlock()
		flushErr := <-flushed
		// A batch is pushed again until its delivery timeout, but read as a
		// call sent once: an answer that may follow applying (a 500) leaves
		// it open.
		checkAnswer(t, "producer: the batch", waitErr(first), f.wantOnce)
		wantFirst := map[string]queen.PushState{"not sent": queen.PushNotStored, "neither": queen.PushNotStored,
			"unknown": queen.PushUnknown}[answers(waitErr(first))]
		if first.State() != wantFirst {
			t.Errorf("producer: the batch's state is %v; its error answers %s", first.State(), answers(waitErr(first)))
		}
		checkAnswer(t, "producer: the message behind", waitErr(behind), "not sent")
		if behind.State() != queen.PushNotStored {
			t.Errorf("producer: the message behind is %v", behind.State())
		}
		flushWant := "neither"
		switch answers(waitErr(first)) {
		case "unknown":
			flushWant = "unknown"
		case "not sent":
			flushWant = "not sent"
		}
		checkAnswer(t, "producer: Flush", flushErr, flushWant)
		if pause {
			checkAnswer(t, "producer: a push to a paused partition", waitErr(p.Push(ctx, 3)), "not sent")
			p.Resume()
		}
		rt.set("", nil)
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// loopAnswers checks the *LoopError a consume loop hands OnLoopError when
// its pops, then its acks, fail as f says.
func loopAnswers(t *testing.T, c *queen.Client, rt *faulty, f *fault) {
	t.Helper()
	for _, step := range []struct {
		path, op, want string
	}{
		{"/api/v1/pop", queen.LoopOpPop, f.wantOnce},
		{"/api/v1/ack", queen.LoopOpSettle, f.want},
	} {
		q := "looped-" + step.op
		if _, err := c.Queue(q).Push(1).Execute(context.Background()); err != nil {
			t.Fatal(err)
		}
		rt.set(step.path, f)
		ctx, stop := context.WithCancel(context.Background())
		var got []error
		err := c.Queue(q).Consume(ctx, func(context.Context, *queen.Message) error { return nil }).
			OnLoopError(func(_ context.Context, err error) {
				got = append(got, err)
				stop()
			}).Execute(ctx)
		stop()
		rt.set("", nil)
		if err != nil {
			checkAnswer(t, "consume "+step.op+": Execute", err, step.want)
		}
		if len(got) == 0 {
			t.Errorf("consume %s: no loop error", step.op)
			continue
		}
		le, ok := errors.AsType[*queen.LoopError](got[0])
		if !ok || le.Op != step.op {
			t.Errorf("consume %s: %v", step.op, got[0])
			continue
		}
		checkAnswer(t, "consume "+step.op, got[0], step.want)
	}
}

// The ack of issue 37: its first attempt went out and lost its answer, the
// retry is refused "Invalid or expired lease" (the first one settled the
// message and released the lease). The refusal does not take the first
// attempt back: the error matches ErrOutcomeUnknown, and errors.As still
// finds the *AckError with its result. Likewise a push whose retry is
// answered with a failed item.
func TestARefusalAfterAnAttemptThatMayHaveAppliedIsUnknown(t *testing.T) {
	srv := queentest.NewServer()
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		rt := &faulty{srv: srv}
		c, err := queen.New(srv.URL, queen.WithHTTPClient(&http.Client{Transport: rt}),
			queen.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		msg := leasedMessage(t, c, "acked")
		rt.set("/api/v1/ack", &fault{err: io.EOF, then: &fault{status: http.StatusOK,
			body: `[{"index":0,"transactionId":"` + msg.TransactionID + `","success":false,"error":"Invalid or expired lease"}]`}})
		res, err := c.Ack(context.Background(), msg, true, queen.AckOptions{})
		rt.set("", nil)
		var ae *queen.AckError
		if answers(err) != "unknown" || !errors.As(err, &ae) || res.Success || res.Error != "Invalid or expired lease" {
			t.Errorf("ack: %+v, %v (answers %s)", res, err, answers(err))
		}

		rt.set("/api/v1/push", &fault{err: io.EOF, then: &fault{status: http.StatusCreated,
			body: `[{"index":0,"transactionId":"t1","status":"failed","error":"refused"}]`}})
		_, err = c.Queue("pushed").Push(queen.Item{Payload: 1, TransactionID: "t1"}).Execute(context.Background())
		rt.set("", nil)
		var pe *queen.PushError
		if answers(err) != "unknown" || !errors.As(err, &pe) {
			t.Errorf("push: %v (answers %s)", err, answers(err))
		}
	})
}

// A 0.15.1 replay whose copy was stored was applied, whatever the removal
// of the letter after it did: its error (with Result kept) matches
// neither ErrNotSent nor ErrOutcomeUnknown, though the delete was not sent.
// ReplayDeadLetters that stops at a letter not sent, after replaying
// others, answers neither too: its first replays were applied.
func TestReplayAfterAnAppliedStepAnswersNeither(t *testing.T) {
	srv := queentest.NewServer(queentest.WithProfile(queentest.Profile015))
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		rt := &faulty{srv: srv}
		c, err := queen.New(srv.URL, queen.WithHTTPClient(&http.Client{Transport: rt}),
			queen.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		ctx := context.Background()
		deadLetterAll(t, c, "hooks", "sender", 2, "c1")
		page, err := c.Admin().ListDLQ(ctx, "hooks", queen.DLQListOptions{})
		if err != nil || len(page.Messages) != 2 {
			t.Fatalf("list: %+v, %v", page, err)
		}

		rt.set("/api/v1/messages", &fault{method: http.MethodDelete, err: refusedErr})
		res, err := c.Admin().ReplayDLQ(ctx, page.Messages[0])
		rt.set("", nil)
		if res.Result != queen.ReplayKept || answers(err) != "neither" || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("replay whose delete was not sent: %+v, %v (answers %s)", res, err, answers(err))
		}

		// The kept letter's message again (a duplicate, removed now), then
		// the other letter, whose push is not sent.
		rt.set("/api/v1/push", &fault{method: http.MethodPost, pass: 1, err: refusedErr})
		rep, err := c.Admin().ReplayDeadLetters(ctx, "hooks", queen.DLQListOptions{})
		rt.set("", nil)
		if len(rep.Results) != 1 || answers(err) != "neither" || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("replay of both letters: %+v, %v (answers %s)", rep, err, answers(err))
		}
	})
}
