package integration

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// The tests of this file run the documentation's snippets
// (snippets_page_test.go) on the data the page implies and check what the
// page says they do. The snippets name fixed queues ("orders", "events",
// ...); their client renames those to unique broker queues (aliasTransport),
// so that they can share a broker.

// snippetTimeout bounds a snippet: a loop that never stops ends with the
// ctx, and the checks then fail.
const snippetTimeout = 20 * time.Second

// snippetClient returns a client that renames the given queue names, and the
// broker name of each.
func snippetClient(t *testing.T, names ...string) (*queen.Client, map[string]string) {
	t.Helper()
	m := aliases(names...)
	return newClientAt(t, be.url, m), m
}

// snippetCtx is the ctx a snippet runs under.
func snippetCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), snippetTimeout)
	t.Cleanup(cancel)
	return ctx
}

// order is an order of the page's examples: a number and a total.
func order(n int, total float64) map[string]any { return map[string]any{"n": n, "total": total} }

// checkLines compares what a snippet printed with what the page says.
func checkLines(t *testing.T, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("the snippet printed\n\t%q\nthe page says it prints\n\t%q", got, want)
	}
}

func TestSnippetSeek(t *testing.T) {
	t.Parallel()
	c, _ := snippetClient(t, "events")
	newQueue(t, c, "events", queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	push(t, c, "events", "", numbered(0, 3, nil)...)
	archiver := c.Queue("events").Group("archiver").SubscriptionMode(queen.SubscriptionModeAll).Batch(100)
	checkExactlyOnce(t, "archiver before the seek", nums(t, drain(t, c, archiver, "archiver", 0)), 0, 3)

	snippetSeek(snippetCtx(t), c, fatal{t})

	// The last seek of the snippet was to the end: nothing to read again,
	// and what is pushed later is read.
	if got := popNow(t, archiver); len(got) != 0 {
		t.Errorf("after the seek to the end, archiver reads %v; want nothing", nums(t, got))
	}
	push(t, c, "events", "", numbered(3, 1, nil)...)
	checkExactlyOnce(t, "archiver after a new push", nums(t, drain(t, c, archiver, "archiver", 0)), 3, 1)
}

func TestSnippetConflation(t *testing.T) {
	t.Parallel()
	c, _ := snippetClient(t, "prices")
	newQueue(t, c, "prices", queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	push(t, c, "prices", "A-1",
		map[string]any{"sku": "A-1", "price": 10},
		map[string]any{"sku": "A-1", "price": 11},
		map[string]any{"sku": "A-1", "price": 12})
	awaitPushed(t, c, "prices", 3) // the snippet's pop does not wait
	// The snippet ends the test on an error: find out first whether the
	// broker conflates at all (in a group of its own).
	_, err := c.Queue("prices").Group("probe").Conflation(true).Wait(false).Pop(testCtx(t))
	if be.profile == queentest.Profile015 {
		if !errors.Is(err, queen.ErrConflationUnsupported) {
			t.Fatalf("conflating pop on %s: %v, want ErrConflationUnsupported", be.version, err)
		}
		return
	}
	if errors.Is(err, queen.ErrConflationUnsupported) {
		t.Skipf("broker %s does not conflate: %v", be.version, err)
	}

	out := &recorder{}
	snippetConflation(snippetCtx(t), c, out, fatal{t})

	checkLines(t, out.Lines(), []string{"map[price:12 sku:A-1]"})
	if got := popNow(t, c.Queue("prices").Group("repricer")); len(got) != 0 {
		t.Errorf("after the ack, repricer reads %d messages; 10 and 11 should be retired", len(got))
	}
}

func TestSnippetCommitOnDelivery(t *testing.T) {
	t.Parallel()
	c, _ := snippetClient(t, "metrics")
	newQueue(t, c, "metrics", queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	push(t, c, "metrics", "", numbered(0, 5, map[string]any{"cpu": 0.5})...)
	awaitPushed(t, c, "metrics", 5) // the snippet's pop does not wait

	readings := snippetCommitOnDelivery(snippetCtx(t), c, fatal{t})

	checkExactlyOnce(t, "readings", nums(t, readings), 0, 5)
	for _, r := range readings {
		if r.LeaseID != "" {
			t.Errorf("reading %d is leased (%s); commit on delivery leases nothing", num(t, r), r.LeaseID)
		}
	}
	if got := popNow(t, c.Queue("metrics").Group("live-chart")); len(got) != 0 {
		t.Errorf("live-chart reads %v again: the cursor did not move on delivery", nums(t, got))
	}
}

func TestSnippetFetch(t *testing.T) {
	t.Parallel()
	c, _ := snippetClient(t, "orders")
	newQueue(t, c, "orders", queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)})
	push(t, c, "orders", "customer-42", order(1, 10), order(2, 20), order(3, 30))
	_, err := c.Queue("orders").Fetch(testCtx(t), []string{"customer-42"})
	if be.profile == queentest.Profile015 {
		if !errors.Is(err, queen.ErrNotSupported) {
			t.Fatalf("fetch on %s: %v, want ErrNotSupported", be.version, err)
		}
		return
	}
	if isNotSupported(err) {
		t.Skipf("broker %s cannot fetch by offset: %v", be.version, err)
	}

	out := &recorder{}
	snippetFetch(snippetCtx(t), c, out, fatal{t})

	checkLines(t, out.Lines(), []string{
		`0 {"n":1,"total":10}`,
		`1 {"n":2,"total":20}`,
		`2 {"n":3,"total":30}`,
	})
	// "no group, lease or ack": the queue is as it was.
	if got := nums(t, popPushed(t, c.Queue("orders").Batch(10))); !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("after the fetch, queue mode pops %v, want [1 2 3]", got)
	}
}
