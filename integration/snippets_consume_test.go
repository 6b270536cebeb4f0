package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queen-go/queen"
)

// The tests of the snippets that run a consume loop
// (snippets_page_consume_test.go); see snippets_test.go.

func TestSnippetQueueMode(t *testing.T) {
	t.Parallel()
	c, _ := snippetClient(t, "orders")
	newQueue(t, c, "orders", queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	push(t, c, "orders", "", order(1, 10), order(2, 20), order(3, 30))

	out := &recorder{}
	snippetQueueMode(snippetCtx(t), c, out, fatal{t})

	// "stop after one message": one printed, acked; the others still there.
	checkLines(t, out.Lines(), []string{"map[n:1 total:10]"})
	rest := popPushed(t, c.Queue("orders").Batch(10))
	if got := nums(t, rest); !slices.Equal(got, []int{2, 3}) {
		t.Errorf("after the snippet, queue mode pops %v; want the two orders it did not take, [2 3]", got)
	}
}

func TestSnippetBilling(t *testing.T) {
	t.Parallel()
	t.Run("total above zero is completed", func(t *testing.T) {
		t.Parallel()
		c, _ := snippetClient(t, "orders")
		newQueue(t, c, "orders", queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
		for p := range 3 {
			push(t, c, "orders", fmt.Sprintf("customer-%d", p), order(2*p, 10), order(2*p+1, 20))
		}
		snippetBilling(snippetCtx(t), c, fatal{t})

		// The handler acked one order completed (Limit(1)): billing now
		// reads the five others, and that one is the head of a partition.
		rest := drain(t, c, c.Queue("orders").Group("billing").Batch(100), "billing", 0)
		got := nums(t, rest)
		if len(got) != 5 {
			t.Fatalf("billing reads %v after the snippet, want the 5 orders it did not handle", got)
		}
		checkPartitionOrder(t, "billing after the snippet", rest)
		handled := -1
		for i := range 6 {
			if !slices.Contains(got, i) {
				handled = i
			}
		}
		if handled%2 != 0 {
			t.Errorf("the snippet handled order %d, which is not the first of its partition", handled)
		}
	})
	t.Run("total of zero is failed and comes back", func(t *testing.T) {
		t.Parallel()
		c, _ := snippetClient(t, "orders")
		newQueue(t, c, "orders", queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second), RetryDelay: queen.Ptr(100 * time.Millisecond)})
		push(t, c, "orders", "", order(0, 0))
		snippetBilling(snippetCtx(t), c, fatal{t})

		again := popOne(t, c.Queue("orders").Group("billing").Batch(1), 0, "the failed order")
		checkAttempt(t, again, 2)
		ackAll(t, c, "billing", []*queen.Message{again})
	})
}

func TestSnippetArchiveBatch(t *testing.T) {
	t.Parallel()
	names := aliases("events")
	acks := &ackCounter{}
	c := newClientVia(t, be.url, names, acks.wrap)
	newQueue(t, c, "events", queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	const total = 1000 // the snippet's Limit: it stops once that many are handled
	for p := range 4 {
		push(t, c, "events", fmt.Sprintf("source-%d", p), numbered(p*250, 250, nil)...)
	}

	out := &recorder{}
	snippetArchiveBatch(snippetCtx(t), c, out, fatal{t})

	sum := 0
	for _, l := range out.Lines() {
		var n int
		if _, err := fmt.Sscanf(l, "archiving %d", &n); err != nil {
			t.Fatalf("the snippet printed %q, want \"archiving N\"", l)
		}
		if n < 1 || n > 100 {
			t.Errorf("a batch of %d messages; Batch(100) allows 1 to 100", n)
		}
		sum += n
	}
	if sum != total {
		t.Errorf("the batches hold %d messages in all, want %d (Limit(1000))", sum, total)
	}
	// "all acked if it returns nil": one ack request per call, for the
	// whole batch.
	if n := acks.n.Load(); int(n) != len(out.Lines()) {
		t.Errorf("%d ack requests for %d calls of the handler; want one batch ack per call", n, len(out.Lines()))
	}
	// All acked when the handler returned nil.
	if rest := popNow(t, c.Queue("events").Group("archiver").Batch(100)); len(rest) != 0 {
		t.Errorf("archiver still reads %d messages after the snippet; want them all acked", len(rest))
	}
}

func TestSnippetMailer(t *testing.T) {
	t.Parallel()
	errPermanent := errors.New("permanent failure")
	cases := []struct {
		name string
		send error
		// back: the message comes back (failed); dead: it is dead-lettered.
		back, dead bool
	}{
		{name: "sent", send: nil},
		{name: "permanent error goes to the dead-letter queue", send: fmt.Errorf("550 no such mailbox: %w", errPermanent), dead: true},
		{name: "other error is failed and comes back", send: errors.New("smtp timeout"), back: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, names := snippetClient(t, "emails")
			newQueue(t, c, "emails", queen.QueueConfig{
				LeaseTime: queen.Ptr(30 * time.Second), RetryDelay: queen.Ptr(100 * time.Millisecond), RetryLimit: queen.Ptr(3), DeadLetterQueue: queen.Ptr(true),
			})
			push(t, c, "emails", "", map[string]any{"n": 1, "to": "ada@example.com"})
			var (
				mu   sync.Mutex
				sent []map[string]any
			)
			sendEmail := func(data map[string]any) error {
				mu.Lock()
				defer mu.Unlock()
				sent = append(sent, data)
				return tc.send
			}
			snippetMailer(snippetCtx(t), c, sendEmail, errPermanent, fatal{t})

			mu.Lock()
			if len(sent) != 1 || sent[0]["to"] != "ada@example.com" {
				t.Errorf("sendEmail got %v, want one call with the message's data", sent)
			}
			mu.Unlock()
			mailer := c.Queue("emails").Group("mailer").Batch(1)
			if tc.back {
				m := popOne(t, mailer, 1, "the failed email")
				checkAttempt(t, m, 2)
				ackAll(t, c, "mailer", []*queen.Message{m})
			} else if got := popNow(t, mailer); len(got) != 0 {
				t.Errorf("the email came back (%v); want it settled for good", nums(t, got))
			}
			want := 0
			if tc.dead {
				want = 1
			}
			checkDLQ(t, newClient(t), names["emails"], want)
			if be.srv != nil {
				if n := be.srv.LeasedCount(names["emails"], "mailer"); n != 0 {
					t.Errorf("queentest: %d emails still leased after the snippet settled them", n)
				}
			}
		})
	}
}

func TestSnippetWorker(t *testing.T) {
	t.Parallel()
	c, names := snippetClient(t, "tasks")
	newQueue(t, c, "tasks", queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	const parts, per = 4, 3
	for p := range parts {
		push(t, c, "tasks", fmt.Sprintf("tenant-%d", p), numbered(p*per, per, map[string]any{"tenant": p})...)
	}

	ctx, cancel := context.WithCancel(snippetCtx(t))
	defer cancel()
	var (
		mu           sync.Mutex
		done         []int
		running      = map[float64]bool{} // tenant -> a task of it is running
		now, maxConc int
		lastOf       = map[float64]float64{}
		four         = make(chan struct{}) // closed once four tasks run at once
		fourOnce     sync.Once
	)
	runTask := func(data map[string]any) error {
		tenant, n := data["tenant"].(float64), data["n"].(float64)
		mu.Lock()
		if running[tenant] {
			t.Errorf("two tasks of tenant %v ran at once", tenant)
		}
		if last, ok := lastOf[tenant]; ok && n <= last {
			t.Errorf("tenant %v: task %v ran after %v", tenant, n, last)
		}
		running[tenant], lastOf[tenant] = true, n
		now++
		maxConc = max(maxConc, now)
		if now == 4 {
			fourOnce.Do(func() { close(four) })
		}
		mu.Unlock()

		// Every task waits (a while) until four run at once: "four handlers
		// at once, on four partitions". 20 s guards against a hang, it is
		// no measurement: a loop that runs four at once starts them within
		// milliseconds.
		select {
		case <-four:
		case <-time.After(20 * time.Second):
			fourOnce.Do(func() { close(four) }) // once is enough to fail
		}
		time.Sleep(time.Millisecond)

		mu.Lock()
		defer mu.Unlock()
		running[tenant] = false
		now--
		done = append(done, int(n))
		if len(done) == parts*per {
			cancel() // the deploy: Execute returns once ctx is cancelled
		}
		return nil
	}
	snippetWorker(ctx, c, runTask, fatal{t})

	mu.Lock()
	defer mu.Unlock()
	checkExactlyOnce(t, "tasks run", done, 0, parts*per)
	if maxConc != 4 {
		t.Errorf("at most %d tasks ran at once; Concurrency(4) runs four handlers at once, on four partitions", maxConc)
	}
	if be.srv != nil {
		if n := be.srv.LeasedCount(names["tasks"], "workers"); n != 0 {
			t.Errorf("queentest: %d tasks still leased after the worker stopped", n)
		}
	}
}

func TestSnippetAudit(t *testing.T) {
	t.Parallel()
	if time.Now().Before(time.Date(2026, 10, 22, 0, 0, 0, 0, time.UTC)) {
		t.Skip("the page's date 2026-10-22 is still in the future here: the audit group would find nothing to read again")
	}
	c, _ := snippetClient(t, "orders")
	newQueue(t, c, "orders", queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	push(t, c, "orders", "", order(1, 10), order(2, 20))
	// Another group has read them already; audit reads them again.
	drain(t, c, c.Queue("orders").Group("billing").SubscriptionMode(queen.SubscriptionModeAll).Batch(10), "billing", 0)

	out := &recorder{}
	snippetAudit(snippetCtx(t), c, out, fatal{t})

	checkLines(t, out.Lines(), []string{"again: map[n:1 total:10]"})
	if got := nums(t, popPushed(t, c.Queue("orders").Group("audit").Batch(10))); !slices.Equal(got, []int{2}) {
		t.Errorf("audit reads %v next, want [2]: Limit(1) handled the first order only", got)
	}
}

// ackCounter counts the ack requests (single and batch routes) that go
// through its transport.
type ackCounter struct{ n atomic.Int32 }

func (a *ackCounter) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if strings.HasSuffix(r.URL.Path, "/api/v1/ack") || strings.HasSuffix(r.URL.Path, "/api/v1/ack/batch") {
			a.n.Add(1)
		}
		return next.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
