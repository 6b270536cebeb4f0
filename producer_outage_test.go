package queen_test

import (
	"context"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// stepClock is a producer's clock (queen.ProducerClock) that moves only
// when the test advances it.
type stepClock struct {
	mu    sync.Mutex
	now   time.Time
	waits []*stepWait
}

type stepWait struct {
	at time.Time
	c  chan time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) After(d time.Duration) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &stepWait{at: c.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		w.c <- c.now
		return w.c, func() {}
	}
	c.waits = append(c.waits, w)
	return w.c, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.waits = slices.DeleteFunc(c.waits, func(x *stepWait) bool { return x == w })
	}
}

// advance moves the clock by d and fires the waits then due.
func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.waits = slices.DeleteFunc(c.waits, func(w *stepWait) bool {
		if w.at.After(c.now) {
			return false
		}
		w.c <- c.now
		return true
	})
}

// await returns once exactly n waits are pending, each due at at: every
// batch in the producer's hands waits for the probe due then.
func (c *stepClock) await(n int, at time.Time) {
	for {
		c.mu.Lock()
		ok := len(c.waits) == n && !slices.ContainsFunc(c.waits, func(w *stepWait) bool { return !w.at.Equal(at) })
		c.mu.Unlock()
		if ok {
			return
		}
		runtime.Gosched()
	}
}

// pushLog is a RoundTripper over real connections that notes, in order,
// whether each push was answered.
type pushLog struct {
	next http.RoundTripper
	mu   sync.Mutex
	log  []bool // answered
}

func (rt *pushLog) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := rt.next.RoundTrip(req)
	if req.URL.Path == "/api/v1/push" {
		rt.mu.Lock()
		rt.log = append(rt.log, err == nil)
		rt.mu.Unlock()
	}
	return res, err
}

func (rt *pushLog) pushes() []bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return slices.Clone(rt.log)
}

// A broker stopped and started again (queentest's Stop and Resume, over
// real connections): while it is down the producer sends one batch at a
// time, at most every ProbeEvery, and when a probe is answered every batch
// goes at once, without another wait. The producer's clock is the test's:
// the assertions are on which sends happen at each step of it. The
// outage is logged once: its start and end, and one pair of lines for
// the batches that failed (the first's failure, the last's success).
func TestProducerProbesWhileBrokerIsDown(t *testing.T) {
	defer noProducerGoroutine(t)
	srv := queentest.Start(t)
	rt := &pushLog{next: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(rt.next.(*http.Transport).CloseIdleConnections)
	var logs logSink
	c, err := queen.New(srv.URL, queen.WithHTTPClient(&http.Client{Transport: rt}),
		queen.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	const parts = 4
	// A slot more than partitions: each partition's batch goes in a
	// request of its own (none takes the last slot, which gathers the
	// others' batches).
	p, err := c.Queue("restarted").Producer(queen.WithMaxInflight(parts+1), queen.WithDeliveryTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	clk := &stepClock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	queen.SetProducerClock(p, clk)
	for i := range parts { // connections to the broker, kept in the pool
		if err := waitErr(p.Partition("p"+strconv.Itoa(i)).Push(context.Background(), payload(1000+i))); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	before := len(rt.pushes())

	srv.Stop()
	pending := pushEach(p, 10*parts, parts)
	// The partitions' first batches go until one is not sent (refused, or
	// its kept connection found closed): the others wait for the first
	// probe, and so do the ones that went.
	start := clk.Now()
	next := start.Add(queen.ProbeEvery)
	clk.await(parts, next)
	sends := func() []bool { return rt.pushes()[before:] }
	initial := len(sends())
	if got := sends(); initial < 1 || initial > parts || slices.Contains(got, true) {
		t.Fatalf("sends as the broker went down: %v, want 1 to %d unanswered", got, parts)
	}
	clk.advance(queen.ProbeEvery - time.Millisecond)
	if n := len(sends()); n != initial {
		t.Fatalf("%d sends before the first probe was due", n-initial)
	}
	clk.advance(time.Millisecond)
	for probe := 1; probe <= 3; probe++ {
		next = next.Add(queen.ProbeEvery)
		clk.await(parts, next) // the probe failed, every batch waits for the next one
		if got := sends(); len(got) != initial+probe || slices.Contains(got, true) {
			t.Fatalf("after probe %d: sends %v, want one unanswered send per probe", probe, got)
		}
		if probe < 3 {
			clk.advance(queen.ProbeEvery)
		}
	}

	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	clk.advance(queen.ProbeEvery) // the next probe is answered: every batch goes, with no other wait
	for i, pp := range pending {
		if _, err := pp.Wait(context.Background()); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got := sends()[initial+3:]
	if len(got) < parts || slices.Contains(got, false) {
		t.Fatalf("sends after the broker came back: %v, want every batch answered", got)
	}
	// (The clock did not move again: a producer that waited for it would
	// never have settled them.)
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, msg := range []string{"push failed; sending it again", "push sent again succeeds",
		"the broker is down", "the broker answers again"} {
		if n := strings.Count(out, `level=WARN msg="queen: producer: `+msg); n != 1 {
			t.Errorf("%d Warn lines %q, want 1:\n%s", n, msg, out)
		}
	}
	counts, _ := stored(t, c, "restarted")
	if len(counts) != 11*parts {
		t.Fatalf("%d stored, want %d", len(counts), 11*parts)
	}
	for n, k := range counts {
		if k != 1 {
			t.Fatalf("message %d stored %d times", n, k)
		}
	}
}

// A cluster with a node down is no outage: a send the dead node refuses
// goes to the live node at once, and no partition waits for a probe. The
// dead node's URL comes back to the client's choice after every short
// FailoverPause, so many sends meet it first; the producer's clock never
// moves, so a producer that waited for a probe would never settle them,
// and it never warns that the broker is down.
func TestProducerFailsOverToTheLiveNode(t *testing.T) {
	defer noProducerGoroutine(t)
	cl := queentest.StartCluster(t, 2)
	cl.Node(0).Stop() // the first URL, which the Failover balance tries first
	logs := &logSink{}
	c, err := queen.New(cl.URLs()[0], queen.WithURLs(cl.URLs()...),
		queen.WithRetryPolicy(queen.RetryPolicy{FailoverPause: time.Millisecond}),
		queen.WithLogger(slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	const parts = 4
	p, err := c.Queue("split").Producer(queen.WithMaxInflight(parts+1), queen.WithDeliveryTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	queen.SetProducerClock(p, &stepClock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a guard: it never moved the clock
	defer cancel()
	for round := range 5 {
		for i, pp := range pushEach(p, 4*parts, parts) {
			if _, err := pp.Wait(ctx); err != nil {
				t.Fatalf("round %d, message %d: %v", round, i, err)
			}
		}
		time.Sleep(2 * time.Millisecond) // the dead URL's pause ends: the next sends meet it first
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := cl.Node(1).Requests(queentest.RoutePush); n < 5 {
		t.Fatalf("the live node served %d pushes", n)
	}
	if s := logs.String(); strings.Contains(s, "the broker is down") || strings.Contains(s, "push failed") {
		t.Fatalf("the producer warned of an outage:\n%s", s)
	}
}
