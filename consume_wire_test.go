package queen_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queen-go/queen"
)

// wireRecorder is an httptest broker that answers every pop with 204 (after
// an optional delay) and records the pop queries: for the exact wire shape
// of the loop's pops.
type wireRecorder struct {
	srv      *httptest.Server
	mu       sync.Mutex
	queries  []url.Values
	requests atomic.Int32
	popped   chan struct{} // closed at the first pop
}

func newWireRecorder(t *testing.T, delay time.Duration) *wireRecorder {
	t.Helper()
	w := &wireRecorder{popped: make(chan struct{})}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/health" {
			// The broker's generation, asked before a group's first pop
			// (subscription.go): 2.x.
			_, _ = io.WriteString(rw, `{"status":"healthy","engine":"raft","version":"2.0.1"}`)
			return
		}
		if strings.HasPrefix(req.URL.Path, "/api/v1/consumer-groups/") || strings.HasPrefix(req.URL.Path, "/api/v1/resources/queues/") {
			// The lookup before a group's first pop on 0.15.1
			// (subscription.go), and the loop's read of the queue's retry
			// settings.
			rw.WriteHeader(http.StatusNotFound)
			return
		}
		if w.requests.Add(1) == 1 {
			close(w.popped)
		}
		w.mu.Lock()
		w.queries = append(w.queries, req.URL.Query())
		w.mu.Unlock()
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-req.Context().Done():
			}
		}
		rw.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *wireRecorder) first(t *testing.T) url.Values {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queries) == 0 {
		t.Fatal("no pop was sent")
	}
	return w.queries[0]
}

func recorderClient(t *testing.T, w *wireRecorder) *queen.Client {
	t.Helper()
	c, err := queen.New(w.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// runUntilPop runs a loop until its first pop reached the server, then stops
// it and returns the pops' queries.
func runUntilPop(t *testing.T, w *wireRecorder, qb func(*queen.Client) *queen.QueueBuilder) url.Values {
	t.Helper()
	c := recorderClient(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- qb(c).Consume(ctx, func(context.Context, *queen.Message) error { return nil }).Execute(ctx)
	}()
	select {
	case <-w.popped:
	case <-time.After(30 * time.Second): // a hang guard
		t.Fatal("no pop reached the server")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Execute after cancel = %v, want nil", err)
		}
	case <-time.After(30 * time.Second): // a hang guard
		t.Fatal("Execute did not return after cancel")
	}
	return w.first(t)
}

// The loop long polls by default: wait=true, 30 s.
func TestConsumeLongPollsByDefault(t *testing.T) {
	w := newWireRecorder(t, time.Minute)
	q := runUntilPop(t, w, func(c *queen.Client) *queen.QueueBuilder { return c.Queue("orders").Group("g") })
	if q.Get("wait") != "true" || q.Get("timeout") != "30000" {
		t.Fatalf("pop query %v: want wait=true&timeout=30000", q)
	}
	if q.Get("autoAck") != "" {
		t.Fatalf("pop query %v: the loop's AutoAck must never travel as autoAck", q)
	}
}

// Limit caps the batch of a pop to what is left, so that nothing is popped
// only to be given back.
func TestConsumeLimitCapsPopBatch(t *testing.T) {
	cases := []struct {
		name string
		qb   func(*queen.Client) *queen.QueueBuilder
		want url.Values
	}{
		{"pinned batch above limit", func(c *queen.Client) *queen.QueueBuilder {
			return c.Queue("q").Batch(10).Partitions(4).Limit(3)
		}, url.Values{"batch": {"3"}, "partitions": {"4"}, "autopilot": nil}},
		{"pinned batch below limit", func(c *queen.Client) *queen.QueueBuilder {
			return c.Queue("q").Batch(10).Limit(50)
		}, url.Values{"batch": {"10"}, "autopilot": {"true"}}},
		{"autopilot batch, small limit", func(c *queen.Client) *queen.QueueBuilder {
			return c.Queue("q").Limit(7)
		}, url.Values{"batch": {"7"}, "autopilot": {"true"}}},
		{"autopilot batch and partitions pinned", func(c *queen.Client) *queen.QueueBuilder {
			return c.Queue("q").Partitions(3).Limit(7)
		}, url.Values{"batch": {"7"}, "partitions": {"3"}, "autopilot": nil}},
		{"autopilot, large limit", func(c *queen.Client) *queen.QueueBuilder {
			return c.Queue("q").Limit(5000)
		}, url.Values{"batch": nil, "autopilot": {"true"}}},
		{"no limit", func(c *queen.Client) *queen.QueueBuilder {
			return c.Queue("q")
		}, url.Values{"batch": nil, "autopilot": {"true"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each stop waits for its parked poll to be abandoned
			w := newWireRecorder(t, time.Minute)
			q := runUntilPop(t, w, tc.qb)
			for k, v := range tc.want {
				if v == nil {
					if q.Has(k) {
						t.Errorf("pop query %v: %s must be absent", q, k)
					}
					continue
				}
				if q.Get(k) != v[0] {
					t.Errorf("pop query %v: %s=%q, want %q", q, k, q.Get(k), v[0])
				}
			}
		})
	}
}

// Bad combinations fail before any request is sent.
func TestConsumeRefusesBeforeAnyRequest(t *testing.T) {
	h := func(context.Context, *queen.Message) error { return nil }
	cases := []struct {
		name string
		run  func(ctx context.Context, c *queen.Client) error
		want error
	}{
		{"commit on delivery", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("q").Group("g").CommitOnDelivery(true).Consume(ctx, h).Execute(ctx)
		}, queen.ErrCommitOnDeliveryConsume},
		{"commit on delivery, batch", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("q").Group("g").CommitOnDelivery(true).
				ConsumeBatch(ctx, func(context.Context, []*queen.Message) error { return nil }).Execute(ctx)
		}, queen.ErrCommitOnDeliveryConsume},
		{"conflation without group", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("q").Conflation(true).Consume(ctx, h).Execute(ctx)
		}, queen.ErrConflationNeedsGroup},
		{"nil handler", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("q").Consume(ctx, nil).Execute(ctx)
		}, queen.ErrInvalidOption},
		{"negative grace", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("q").Consume(ctx, h).GracePeriod(-time.Second).Execute(ctx)
		}, queen.ErrInvalidOption},
		{"zero concurrency", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("q").Concurrency(0).Consume(ctx, h).Execute(ctx)
		}, queen.ErrInvalidOption},
		{"renew without interval", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("q").RenewLease(true, 0).Consume(ctx, h).Execute(ctx)
		}, queen.ErrInvalidOption},
		{"timeout above 60 s", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("q").TimeoutMillis(60001).Consume(ctx, h).Execute(ctx)
		}, queen.ErrTimeoutOutOfRange},
		{"conflation with commit on delivery", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("q").Group("g").Conflation(true).CommitOnDelivery(true).Consume(ctx, h).Execute(ctx)
		}, queen.ErrInvalidArgument},
		{"no queue", func(ctx context.Context, c *queen.Client) error {
			return c.Queue("").Consume(ctx, h).Execute(ctx)
		}, queen.ErrEmptyQueue},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWireRecorder(t, 0)
			c := recorderClient(t, w)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := tc.run(ctx, c)
			if !errors.Is(err, tc.want) || !errors.Is(err, queen.ErrInvalidArgument) {
				t.Fatalf("Execute = %v, want %v (and ErrInvalidArgument)", err, tc.want)
			}
			if n := w.requests.Load(); n != 0 {
				t.Fatalf("%d requests sent before the refusal, want 0", n)
			}
		})
	}
}

// Every pop option reaches the wire from a consume loop exactly as from
// Pop (the autopilot rule of PROTOCOL.md 3.3 included): the loop adds
// nothing and drops nothing when no Limit caps the batch.
func TestConsumePopQueryMatchesPop(t *testing.T) {
	cases := map[string]func(*queen.Client) *queen.QueueBuilder{
		"defaults": func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q") },
		"group":    func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").Group("g") },
		"group mode all": func(c *queen.Client) *queen.QueueBuilder {
			return c.Queue("q").Group("g").SubscriptionMode(queen.SubscriptionModeAll)
		},
		"group from": func(c *queen.Client) *queen.QueueBuilder {
			return c.Queue("q").Group("g").SubscriptionFrom("2026-10-22T00:00:00Z")
		},
		"batch only":       func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").Batch(50) },
		"partitions only":  func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").Partitions(1) },
		"batch+partitions": func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").Batch(50).Partitions(4) },
		"autopilot off":    func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").Autopilot(false).Partitions(3) },
		"conflation":       func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").Group("g").Conflation(true) },
		"short poll":       func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").Wait(false) },
		"timeout":          func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").TimeoutMillis(60000) },
		"lease time":       func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").LeaseTime(2 * time.Minute) },
		"pinned partition": func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").Partition("p-1").Batch(5) },
		"large limit":      func(c *queen.Client) *queen.QueueBuilder { return c.Queue("q").Batch(10).Limit(100) },
	}
	for name, qb := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each stop waits for its parked poll to be abandoned
			pw := newWireRecorder(t, 0)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := qb(recorderClient(t, pw)).Pop(ctx); err != nil {
				t.Fatal(err)
			}
			want := pw.first(t)
			got := runUntilPop(t, newWireRecorder(t, time.Minute), qb)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("consume pop query %v, Pop sends %v", got, want)
			}
		})
	}
}
