package queen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/queen-go/queen/internal/transport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every bad input fails with its own sentinel, which also matches
// ErrInvalidArgument, and nothing reaches the broker.
func TestBadInputSendsNothing(t *testing.T) {
	ctx := context.Background()
	pop := func(b func(c *Client) *QueueBuilder) func(c *Client) error {
		return func(c *Client) error { _, err := b(c).Pop(ctx); return err }
	}
	push := func(p func(c *Client) *PushBuilder) func(c *Client) error {
		return func(c *Client) error { _, err := p(c).Execute(ctx); return err }
	}
	msg := popped("tx", "g", "L")
	tests := []struct {
		name string
		call func(c *Client) error
		want error
	}{
		{"conflation without a group", pop(func(c *Client) *QueueBuilder { return c.Queue("q").Conflation(true) }), ErrConflationNeedsGroup},
		{"conflation with commit on delivery", pop(func(c *Client) *QueueBuilder {
			return c.Queue("q").Group("g").Conflation(true).CommitOnDelivery(true)
		}), ErrConflationWithCommitOnDelivery},
		{"partitions 0", pop(func(c *Client) *QueueBuilder { return c.Queue("q").Partitions(0) }), ErrPartitionsOutOfRange},
		{"partitions 65", pop(func(c *Client) *QueueBuilder { return c.Queue("q").Partitions(65) }), ErrPartitionsOutOfRange},
		{"partitions -1", pop(func(c *Client) *QueueBuilder { return c.Queue("q").Partitions(-1) }), ErrPartitionsOutOfRange},
		{"negative batch", pop(func(c *Client) *QueueBuilder { return c.Queue("q").Batch(-1) }), ErrNegativeBatch},
		{"timeout 60001", pop(func(c *Client) *QueueBuilder { return c.Queue("q").TimeoutMillis(60001) }), ErrTimeoutOutOfRange},
		{"negative timeout", pop(func(c *Client) *QueueBuilder { return c.Queue("q").TimeoutMillis(-5) }), ErrTimeoutOutOfRange},
		{"unknown subscription mode", pop(func(c *Client) *QueueBuilder {
			return c.Queue("q").Group("g").SubscriptionMode("latest")
		}), ErrInvalidSubscription},
		{"subscriptionFrom not a time", pop(func(c *Client) *QueueBuilder {
			return c.Queue("q").Group("g").SubscriptionFrom("yesterday")
		}), ErrInvalidSubscription},
		{"subscriptionMode new in queue mode (it only applies to a group)", pop(func(c *Client) *QueueBuilder {
			return c.Queue("q").SubscriptionMode(SubscriptionModeNew)
		}), ErrInvalidSubscription},
		{"subscriptionFrom in queue mode (it only applies to a group)", pop(func(c *Client) *QueueBuilder {
			return c.Queue("q").SubscriptionFrom("2026-10-22T00:00:00Z")
		}), ErrInvalidSubscription},
		{"task on a named queue (discovery pops only)", pop(func(c *Client) *QueueBuilder { return c.Queue("q").Task("billing") }), ErrInvalidOption},
		{"negative lease time", pop(func(c *Client) *QueueBuilder { return c.Queue("q").LeaseTime(-time.Nanosecond) }), ErrInvalidOption},
		{"lease time the broker cannot store", pop(func(c *Client) *QueueBuilder {
			return c.Queue("q").LeaseTime((math.MaxInt32 + 1) * time.Second)
		}), ErrInvalidOption},
		{"negative lease time: consume", func(c *Client) error {
			return c.Queue("q").LeaseTime(-time.Second).Consume(ctx, func(context.Context, *Message) error { return nil }).Execute(ctx)
		}, ErrInvalidOption},
		{"empty queue: pop", pop(func(c *Client) *QueueBuilder { return c.Queue("") }), ErrEmptyQueue},
		{"empty namespace: pop", pop(func(c *Client) *QueueBuilder { return c.Namespace("") }), ErrEmptyQueue},
		{"empty queue: push", push(func(c *Client) *PushBuilder { return c.Queue("").Push(1) }), ErrEmptyQueue},
		{"empty queue: create", func(c *Client) error { _, err := c.Queue("").Create().Execute(ctx); return err }, ErrEmptyQueue},
		{"sink hold name the broker refuses", func(c *Client) error {
			_, err := c.Queue("q").Config(QueueConfig{RetentionSinkHold: Ptr("lake/1")}).Create().Execute(ctx)
			return err
		}, ErrInvalidOption},
		{"sink hold name over 64 bytes", func(c *Client) error {
			_, err := c.Queue("q").Config(QueueConfig{RetentionSinkHold: Ptr(strings.Repeat("a", 65))}).Create().Execute(ctx)
			return err
		}, ErrInvalidOption},
		{"sink hold ceiling under a minute", func(c *Client) error {
			_, err := c.Queue("q").Config(QueueConfig{RetentionSinkHoldMax: Ptr(59 * time.Second)}).Create().Execute(ctx)
			return err
		}, ErrInvalidOption},
		{"sink hold ceiling over a year", func(c *Client) error {
			_, err := c.Queue("q").Config(QueueConfig{RetentionSinkHoldMax: Ptr(365*24*time.Hour + time.Nanosecond)}).Create().Execute(ctx)
			return err
		}, ErrInvalidOption},
		{"empty queue: delete", func(c *Client) error { _, err := c.Queue("").Delete().Execute(ctx); return err }, ErrEmptyQueue},
		{"non-UUID trace id", push(func(c *Client) *PushBuilder { return c.Queue("q").Push(1).TraceID("trace-1") }), ErrInvalidTraceID},
		{"UUID without dashes", push(func(c *Client) *PushBuilder {
			return c.Queue("q").Push(1).TraceID("5f0c7d1e3b2a4c8d9e6f0a1b2c3d4e5f")
		}), ErrInvalidTraceID},
		{"non-UUID trace id on an item", push(func(c *Client) *PushBuilder {
			return c.Queue("q").Push(1, Item{Payload: 2, TraceID: "not-a-uuid"})
		}), ErrInvalidTraceID},
		{"invalid JSON raw payload", push(func(c *Client) *PushBuilder { return c.Queue("q").Push(json.RawMessage(`{"a":`)) }), ErrInvalidPayload},
		{"invalid JSON bytes payload", push(func(c *Client) *PushBuilder { return c.Queue("q").Push(1, []byte("not json")) }), ErrInvalidPayload},
		{"payload that cannot be encoded", push(func(c *Client) *PushBuilder { return c.Queue("q").Push(make(chan int)) }), ErrInvalidPayload},
		{"push of nothing", push(func(c *Client) *PushBuilder { return c.Queue("q").Push() }), ErrNoMessages},
		{"more transaction ids than payloads", push(func(c *Client) *PushBuilder {
			return c.Queue("q").Push(1).TransactionIDs("a", "b")
		}), ErrInvalidOption},
		{"ack of nil", func(c *Client) error { _, err := c.Ack(ctx, nil, true, AckOptions{}); return err }, ErrNotAckable},
		{"ack of a message not from a pop", func(c *Client) error {
			_, err := c.Ack(ctx, &Message{TransactionID: "tx"}, true, AckOptions{})
			return err
		}, ErrNotAckable},
		{"unknown ack status", func(c *Client) error { _, err := c.Settle(ctx, msg, "done", AckOptions{}); return err }, ErrUnknownStatus},
		{"empty batch ack", func(c *Client) error { _, err := c.SettleBatch(ctx, nil, AckOptions{}); return err }, ErrNoMessages},
		{"batch ack across groups", func(c *Client) error {
			_, err := c.SettleBatch(ctx, []Settlement{{Message: popped("a", "g1", "L"), Status: StatusCompleted},
				{Message: popped("b", "g2", "L"), Status: StatusCompleted}}, AckOptions{})
			return err
		}, ErrInvalidOption},
		{"renew of nothing", func(c *Client) error { _, err := c.Renew(ctx); return err }, ErrNoMessages},
		{"renew of a message without a lease", func(c *Client) error { _, err := c.Renew(ctx, popped("a", "g", "")); return err }, ErrNotAckable},
		{"renew for zero", func(c *Client) error { _, err := c.RenewFor(ctx, 0, msg); return err }, ErrInvalidOption},
		{"consume option out of range", func(c *Client) error {
			return c.Queue("q").Concurrency(0).Consume(ctx, func(context.Context, *Message) error { return nil }).Execute(ctx)
		}, ErrInvalidOption},
		{"name that escapes its path", pop(func(c *Client) *QueueBuilder { return c.Queue("..") }), ErrInvalidName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, c := newRecorder(t)
			err := tt.call(c)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.want)
			assert.ErrorIs(t, err, ErrInvalidArgument)
			var be *BrokerError
			assert.False(t, errors.As(err, &be), "no broker answer is involved")
			assert.Zero(t, rec.hits(), "nothing may be sent")
		})
	}
}

// Sentinels are distinct from one another.
func TestSentinelsAreDistinct(t *testing.T) {
	all := []error{ErrInvalidURL, ErrEmptyQueue, ErrConflationNeedsGroup, ErrConflationWithCommitOnDelivery,
		ErrPartitionsOutOfRange, ErrNegativeBatch, ErrTimeoutOutOfRange, ErrInvalidSubscription, ErrInvalidTraceID,
		ErrInvalidPayload, ErrNoMessages, ErrNotAckable, ErrUnknownStatus, ErrCommitOnDeliveryConsume, ErrInvalidOption,
		ErrEmptyTransaction, ErrInvalidSeek, ErrEmptyGroup, ErrEmptyPartition, ErrNotReplayable, ErrInvalidName}
	for i, a := range all {
		assert.ErrorIs(t, a, ErrInvalidArgument)
		for j, b := range all {
			if i != j {
				assert.NotErrorIs(t, a, b)
			}
		}
	}
	for _, e := range []error{ErrClosed, ErrConflationUnsupported, ErrNotSupported, ErrLeaseLost} {
		assert.NotErrorIs(t, e, ErrInvalidArgument)
	}
}

func TestNewRefusesBadURLs(t *testing.T) {
	rec, _ := newRecorder(t)
	for _, tt := range []struct {
		name string
		url  string
		opts []Option
	}{
		{"empty", "", nil},
		{"no scheme", "localhost:6632", nil},
		{"not http", "ftp://broker:21", nil},
		{"no host", "http://", nil},
		{"query", "http://broker:6632/?x=1", nil},
		{"fragment", "http://broker:6632/#top", nil},
		{"unparsable", "http://[::1", nil},
		{"empty query", "http://broker:6632/?", nil},
		{"user info", "http://user:secret@broker:6632", nil},
		{"bad failover URL", rec.srv.URL, []Option{WithURLs("broker-2:6632")}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.url, tt.opts...)
			assert.Nil(t, c)
			assert.ErrorIs(t, err, ErrInvalidURL)
			assert.ErrorIs(t, err, ErrInvalidArgument)
		})
	}
	for _, tt := range []struct {
		name string
		opt  Option
	}{
		{"negative timeout", WithRequestTimeout(-time.Second)},
		{"negative idle connections", WithIdleConns(-1)},
		{"negative retry attempts", WithRetryPolicy(RetryPolicy{MaxAttempts: -1})},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(rec.srv.URL, tt.opt)
			assert.Nil(t, c)
			assert.ErrorIs(t, err, ErrInvalidOption)
			assert.ErrorIs(t, err, ErrInvalidArgument)
		})
	}
	assert.Zero(t, rec.hits())
}

// A broker refusal is one *BrokerError, found with errors.As through any
// wrapping, carrying status, code, message and Retry-After.
func TestBrokerErrorThroughWrappers(t *testing.T) {
	ctx := context.Background()
	ops := map[string]func(c *Client) error{
		// Wait(false): a short pop (a waiting one: TestWaitingPopIsBounded).
		"pop":    func(c *Client) error { _, err := c.Queue("q").Wait(false).Pop(ctx); return err },
		"push":   func(c *Client) error { _, err := c.Queue("q").Push(1).Execute(ctx); return err },
		"ack":    func(c *Client) error { _, err := c.Ack(ctx, popped("a", "g", "L"), true, AckOptions{}); return err },
		"renew":  func(c *Client) error { _, err := c.Renew(ctx, popped("a", "g", "L")); return err },
		"create": func(c *Client) error { _, err := c.Queue("q").Create().Execute(ctx); return err },
		"delete": func(c *Client) error { _, err := c.Queue("q").Delete().Execute(ctx); return err },
	}
	answers := []struct {
		name       string
		answer     answer
		status     int
		code       string
		msg        string
		retryAfter time.Duration
		temporary  bool
	}{
		{"429 with Retry-After seconds", answer{status: 429, body: golden(t, "broker-2.x/error_429_overloaded.json"), header: map[string]string{"Retry-After": "3"}},
			429, "overloaded", "admission budget full", 3 * time.Second, true},
		{"503 no_leader, fractional Retry-After", answer{status: 503, body: golden(t, "broker-2.x/error_503_no_leader.json"), header: map[string]string{"Retry-After": "1.5"}},
			503, "no_leader", "no leader elected", 1500 * time.Millisecond, true},
		{"400 bad_body", answer{status: 400, body: golden(t, "broker-2.x/error_400_bad_body.json")},
			400, "bad_body", "expected value", 0, false},
		{"403 with a plain-text body", answer{status: 403, body: "forbidden here"},
			403, "", "forbidden here", 0, false},
		{"401 without a body", answer{status: 401},
			401, "", "Unauthorized", 0, false},
	}
	for opName, op := range ops {
		for _, a := range answers {
			t.Run(opName+"/"+a.name, func(t *testing.T) {
				rec, c := newRecorder(t, a.answer)
				err := op(c)
				wrapped := fmt.Errorf("outer: %w", fmt.Errorf("middle: %w", err))
				var be *BrokerError
				require.ErrorAs(t, wrapped, &be)
				assert.Equal(t, a.status, be.Status)
				assert.Equal(t, a.code, be.Code)
				assert.Contains(t, be.Message, a.msg)
				assert.Equal(t, a.retryAfter, be.RetryAfter)
				assert.Equal(t, a.temporary, be.Temporary())
				assert.Contains(t, be.Error(), fmt.Sprint(a.status))
				assert.NotErrorIs(t, err, ErrInvalidArgument)
				assert.Equal(t, 1, rec.hits())
			})
		}
	}
}

func TestRetryAfterHTTPDate(t *testing.T) {
	at := time.Now().Add(20 * time.Second).UTC().Format(http.TimeFormat)
	_, c := newRecorder(t, answer{status: 503, body: `{"error":"busy","code":"retry"}`, header: map[string]string{"Retry-After": at}})
	_, err := c.Queue("q").Wait(false).Pop(context.Background())
	var be *BrokerError
	require.ErrorAs(t, err, &be)
	assert.InDelta(t, 20*time.Second, be.RetryAfter, float64(2*time.Second))
}

// A 4xx is never retried, even when the policy allows many attempts.
func TestClientErrorsAreNotRetried(t *testing.T) {
	rec, c := newRecorderOpts(t, []Option{WithRetryPolicy(RetryPolicy{MaxAttempts: 5, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})},
		answer{status: 400, body: golden(t, "broker-2.x/error_400_bad_body.json")})
	_, err := c.Queue("q").Push(1).Execute(context.Background())
	var be *BrokerError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, 1, rec.hits())
}

func TestClosedClientSendsNothing(t *testing.T) {
	rec, c := newRecorder(t)
	require.NoError(t, c.Close(context.Background()))
	require.NoError(t, c.Close(context.Background()), "closing twice is fine")
	_, err := c.Queue("q").Push(1).Execute(context.Background())
	assert.ErrorIs(t, err, ErrClosed)
	_, err = c.Queue("q").Pop(context.Background())
	assert.ErrorIs(t, err, ErrClosed)
	assert.Zero(t, rec.hits())
}

func TestRequestHeaders(t *testing.T) {
	rec, c := newRecorderOpts(t, []Option{WithBearerToken("s3cret")}, answer{status: 201, body: `[{"index":0,"status":"queued"}]`})
	_, err := c.Queue("q").Push(1).Execute(context.Background())
	require.NoError(t, err)
	h := rec.only(t).Header
	assert.Equal(t, "Bearer s3cret", h.Get("Authorization"))
	assert.Equal(t, "application/json", h.Get("Accept"))
	assert.Equal(t, "application/json", h.Get("Content-Type"))
}

// The client fails over to the next URL when the first one is down.
func TestFailoverToTheNextURL(t *testing.T) {
	rec, _ := newRecorder(t, answer{status: 201, body: `[{"index":0,"status":"queued"}]`})
	down, _ := newRecorder(t)
	down.srv.Close() // nothing listens there any more
	c, err := New(down.srv.URL, WithURLs(rec.srv.URL),
		WithRetryPolicy(RetryPolicy{MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}))
	require.NoError(t, err)
	defer c.Close(context.Background())
	res, err := c.Queue("q").Push(1).Execute(context.Background())
	require.NoError(t, err)
	assert.Equal(t, PushQueued, res[0].Status)
	assert.Equal(t, 1, rec.hits())
}

// A cancelled ctx stops a call; the error says so.
func TestContextCancelled(t *testing.T) {
	_, c := newRecorder(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Queue("q").Pop(ctx)
	assert.ErrorIs(t, err, context.Canceled)
}

// A waiting pop has the attempt budget of every other call: on a broker
// that answers 503 it gives up after MaxAttempts with the last answer, and
// on a dead broker after MaxAttempts refused connections with the network
// error, saying how many attempts it made.
func TestWaitingPopIsBounded(t *testing.T) {
	busy := answer{status: 503, body: golden(t, "broker-2.x/error_503_no_leader.json")}
	policy := WithRetryPolicy(RetryPolicy{MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})
	// The ctx only keeps a pop that never gives up from hanging the test.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, c := newRecorderOpts(t, []Option{policy}, busy)
	_, err := c.Queue("t1").Wait(true).Pop(ctx)
	var be *BrokerError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, 503, be.Status)
	assert.Equal(t, 3, be.Attempts)
	assert.Contains(t, err.Error(), "(after 3 attempts)")
	assert.NotErrorIs(t, err, ErrOutcomeUnknown, "a 503 was not served")
	assert.Equal(t, 3, rec.hits())

	// A retried 503 that then succeeds is the success.
	rec2, c2 := newRecorderOpts(t, []Option{policy}, busy, busy, ok200(t, "broker-0.15.1/pop_queue_mode_three.json"))
	msgs, err := c2.Queue("t1").Pop(context.Background())
	require.NoError(t, err)
	assert.Len(t, msgs, 3)
	assert.Equal(t, 3, rec2.hits())

	// Dead broker: a closed port.
	dead, _ := newRecorder(t)
	dead.srv.Close()
	c3, err := New(dead.srv.URL, policy)
	require.NoError(t, err)
	defer c3.Close(context.Background())
	_, err = c3.Queue("t1").Group("g").Wait(true).TimeoutMillis(30000).Pop(ctx)
	require.Error(t, err)
	// Bounded by the attempts, not by the wait or a ctx: the network
	// error, not the ctx's.
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "bounded by the attempts, not by the wait or a ctx")
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	var op *net.OpError
	require.ErrorAs(t, err, &op)
	assert.Equal(t, "dial", op.Op)
	assert.NotErrorIs(t, err, ErrOutcomeUnknown, "a refused connection sent nothing")
	assert.Contains(t, err.Error(), "no answer after 3 attempt(s)")

	// Cancelled while waiting between attempts: the ctx error.
	// The cancel comes once the client has decided to retry (its Debug
	// record of the retry, logged as the 30 s wait begins), so during that
	// wait. A cancel before that decision, even once the 503 is read (its
	// RequestHook ran), returns the answer instead: a pop takes an answer
	// received as its ctx ends.
	waiting := make(chan struct{}, 1)
	ctx4, cancel4 := context.WithCancel(context.Background())
	rec4, c4 := newRecorderOpts(t, []Option{policy, WithLogger(slog.New(retryLogged(waiting)))},
		answer{status: 503, body: "{}", header: map[string]string{"Retry-After": "30"}})
	go func() {
		<-waiting
		cancel4()
	}()
	_, err = c4.Queue("t1").Pop(ctx4)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, rec4.hits(), "cancelled during the wait before the second attempt")
}

// BrokerError.Temporary is the client's one retry rule (the transport's
// retries and the consume loop follow it too).
func TestTemporaryIsTheRetryRule(t *testing.T) {
	want := map[int]bool{
		400: false, 401: false, 403: false, 404: false, 409: false, 413: false,
		408: true, 429: true, 500: true, 502: true, 503: true, 504: true, 507: true,
		501: false, 505: false, 506: false, 508: false, 510: false, 511: false,
	}
	for status, temporary := range want {
		assert.Equal(t, temporary, (&BrokerError{Status: status}).Temporary(), "Temporary of %d", status)
	}
	for status := 100; status < 600; status++ {
		assert.Equal(t, transport.Retryable(status), (&BrokerError{Status: status}).Temporary(), "Temporary of %d", status)
	}
}

// retryLogged is a slog.Handler that signals on ch when the client logs
// that it retries a request (the Debug record of WithLogger), which it does
// once it has decided to, right before the wait between the attempts.
type retryLogged chan struct{}

func (retryLogged) Enabled(context.Context, slog.Level) bool { return true }

func (ch retryLogged) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelDebug && r.Message == "queen transport: retrying" {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return nil
}

func (ch retryLogged) WithAttrs([]slog.Attr) slog.Handler { return ch }
func (ch retryLogged) WithGroup(string) slog.Handler      { return ch }

// unanswered hides the answer to "was it applied?" of a whole tree of
// errors, and nothing else: the reasons and the *BrokerError stay found,
// through a chain and through a join.
func TestUnansweredHidesOnlyTheAnswer(t *testing.T) {
	be := &BrokerError{Status: http.StatusInternalServerError}
	cause := &deliveryTimeoutError{timeout: time.Second, attempts: 2,
		err: errors.Join(outcomeUnknown(be), &notSentError{context.Canceled})}
	require.ErrorIs(t, cause, ErrOutcomeUnknown)
	require.ErrorIs(t, cause, ErrNotSent)
	u := unanswered(cause)
	assert.Equal(t, cause.Error(), u.Error())
	assert.NotErrorIs(t, u, ErrOutcomeUnknown)
	assert.NotErrorIs(t, u, ErrNotSent)
	assert.ErrorIs(t, u, ErrDeliveryTimeout)
	assert.ErrorIs(t, u, context.Canceled)
	got, ok := errors.AsType[*BrokerError](u)
	assert.True(t, ok)
	assert.Same(t, be, got)
	var temp interface{ Temporary() bool }
	if assert.ErrorAs(t, u, &temp) {
		assert.True(t, temp.Temporary())
	}
	dt, ok := errors.AsType[*deliveryTimeoutError](u)
	assert.True(t, ok)
	assert.Same(t, cause, dt)
	assert.Nil(t, unanswered(nil))
	// A value that is not comparable is compared with nothing.
	assert.NotErrorIs(t, unanswered(uncomparable{}), ErrClosed)
}

type uncomparable []string

func (uncomparable) Error() string { return "uncomparable" }
