package queen

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// fakeBroker is a consumeBroker in memory, for the engine's parts: no
// HTTP. Partitions are ordered logs; a pop leases up to its batch of the
// first messages of partitions no lease holds; a settle applies the four
// outcomes (completed and dlq retire a message, failed and retry put it
// back), and keeps a partition's lease as the brokers do (PROTOCOL.md §4.1,
// §15-16, §19): a `completed` of some of the messages the lease holds there
// keeps it, the ack of the last one ends it; `retry` and `failed` end it;
// `dlq` ends it as on 2.x, or, with dlqKeeps, counts as an ack like
// `completed` as on 0.15.1. renew answers alive while the lease holds a
// partition, unless the test's script says it is lost.
type fakeBroker struct {
	mu      sync.Mutex
	batch   int                   // a pop's size when the engine does not cap it
	perPart int                   // most messages a pop takes from one partition (0: no cap)
	maxPart int                   // most partitions one pop takes (0: no cap)
	parts   map[string][]*Message // partition -> messages not retired, in order
	order   []string              // partitions in creation order
	added   map[string]int        // messages ever added, per partition
	leased  map[string]string     // partition -> lease id
	unacked map[string]int        // partition -> messages of its lease not yet acked
	// dlqKeeps: a dlq ack keeps the lease, as on 0.15.1 (on 2.x it ends it).
	dlqKeeps  bool
	leases    map[string][]*Message // lease id -> its messages
	seq       int                   // lease ids
	popErrs   []error               // the next pops fail with these, in order
	setErrs   []error               // the next settles fail with these, in order
	lost      map[string]bool       // leases renew reports lost
	renewEr   error                 // renew fails with this while set
	renewGate chan struct{}         // when set, a renewal waits for it (or its ctx) before answering
	// leaseFor: when set, a lease ends this long after its pop or its last
	// renewal (a renewal never shortens it); a lease that ended is not
	// renewed and its partitions are claimed again.
	leaseFor time.Duration
	expires  map[string]time.Time // lease id -> its end, with leaseFor
	popWait  time.Duration        // an empty pop waits this long (or its ctx)
	popGate  chan struct{}        // when set, a pop waits for it before answering
	setGate  chan struct{}        // when set, a settle waits for it before answering
	setAfter chan struct{}        // when set, a settle waits for it after applying, before answering
	setting  int                  // settles in flight now
	rule     *retryRule           // the queue's retry settings (nil: a view without them)
	ruleErrs []error              // the next reads of the settings fail with these, in order
	quickMs  *int                 // when set, an empty answer to a pop that did not wait advises this pause (autopilot waitMs)

	pops      []int          // every pop's cap
	nowaits   []bool         // whether each pop was one that does not wait
	inflight  int            // pops in flight now
	maxFlight int            // the most pops in flight at once
	waiting   int            // empty long polls waiting now
	maxWait   int            // the most empty long polls waiting at once
	acks      [][]Settlement // every settle's outcomes
	renews    map[string]int // lease id -> renewals
	retired   []string       // messages completed or dead-lettered, by key
	ruleReads int            // retryRule calls
}

func newFakeBroker(batch int) *fakeBroker {
	return &fakeBroker{batch: batch, parts: map[string][]*Message{}, added: map[string]int{}, leased: map[string]string{},
		unacked: map[string]int{}, leases: map[string][]*Message{}, lost: map[string]bool{}, renews: map[string]int{}, popWait: 5 * time.Millisecond}
}

// add appends n messages to partition p, keyed "p/i" (i counts from 0
// in each partition).
func (f *fakeBroker) add(p string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.parts[p]; !ok {
		f.order = append(f.order, p)
	}
	for range n {
		k := f.added[p]
		f.added[p]++
		f.parts[p] = append(f.parts[p], &Message{
			TransactionID: fmt.Sprintf("%s/%d", p, k), PartitionID: p, Partition: p, Queue: "q",
			Data: map[string]any{"p": p, "i": k}, Raw: []byte("{}"), Offset: int64(k),
		})
	}
}

func (f *fakeBroker) pop(ctx context.Context, capped int, nowait bool) (*popResult, error) {
	f.mu.Lock()
	f.pops = append(f.pops, capped)
	f.nowaits = append(f.nowaits, nowait)
	f.inflight++
	f.maxFlight = max(f.maxFlight, f.inflight)
	gate := f.popGate
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight--
		f.mu.Unlock()
	}()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	if len(f.popErrs) > 0 {
		err := f.popErrs[0]
		f.popErrs = f.popErrs[1:]
		f.mu.Unlock()
		return nil, err
	}
	n := f.batch
	if capped > 0 {
		n = min(n, capped)
	}
	f.seq++
	lease := fmt.Sprintf("L%d", f.seq)
	var got []*Message
	parts := 0
	for _, p := range f.order {
		if len(got) == n || (f.maxPart > 0 && parts == f.maxPart) {
			break
		}
		if (f.leased[p] != "" && !f.ended(f.leased[p])) || len(f.parts[p]) == 0 {
			continue
		}
		take := min(len(f.parts[p]), n-len(got))
		if f.perPart > 0 {
			take = min(take, f.perPart)
		}
		for _, m := range f.parts[p][:take] {
			c := *m
			c.LeaseID = lease
			got = append(got, &c)
		}
		f.leased[p] = lease
		f.unacked[p] = take
		parts++
	}
	if len(got) > 0 {
		f.leases[lease] = got
		if f.leaseFor > 0 {
			if f.expires == nil {
				f.expires = map[string]time.Time{}
			}
			f.expires[lease] = time.Now().Add(f.leaseFor)
		}
	}
	f.mu.Unlock()
	if len(got) == 0 && nowait {
		var empty popResult
		if f.quickMs != nil {
			empty.autopilot = &wire.AutopilotEcho{WaitMs: f.quickMs}
		}
		return &empty, nil
	}
	if len(got) == 0 {
		f.mu.Lock()
		f.waiting++
		f.maxWait = max(f.maxWait, f.waiting)
		f.mu.Unlock()
		defer func() {
			f.mu.Lock()
			f.waiting--
			f.mu.Unlock()
		}()
		t := time.NewTimer(f.popWait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &popResult{}, nil
	}
	return &popResult{messages: got, leaseID: lease}, nil
}

func (f *fakeBroker) settle(ctx context.Context, acks []Settlement) ([]AckResult, error) {
	f.mu.Lock()
	gate := f.setGate
	f.setting++
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			f.mu.Lock()
			f.setting--
			f.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	after := f.setAfter
	defer func() {
		f.mu.Unlock()
		if after != nil {
			<-after
		}
	}()
	f.setting--
	f.acks = append(f.acks, slices.Clone(acks))
	if len(f.setErrs) > 0 {
		err := f.setErrs[0]
		f.setErrs = f.setErrs[1:]
		return nil, err
	}
	res := make([]AckResult, len(acks))
	for i, a := range acks {
		res[i] = AckResult{TransactionID: a.Message.TransactionID, Success: true, LeaseReleased: true, DLQ: a.Status == StatusDLQ}
	}
	for _, a := range acks {
		m := a.Message
		if a.Status == StatusCompleted || a.Status == StatusDLQ {
			if part := f.parts[m.PartitionID]; len(part) > 0 && part[0].TransactionID == m.TransactionID {
				f.parts[m.PartitionID] = part[1:] // the usual case, in O(1)
			} else {
				f.parts[m.PartitionID] = slices.DeleteFunc(part, func(o *Message) bool {
					return o.TransactionID == m.TransactionID
				})
			}
			f.retired = append(f.retired, m.TransactionID)
		}
		f.endLease(m.PartitionID, m.LeaseID, a.Status)
	}
	return res, nil
}

// endLease applies an ack of status under lease to partition p's lease:
// a completed (or, with dlqKeeps, a dlq) counts one of its messages acked
// and ends it with the last; retry, failed and (2.x) dlq end it. An ack
// under another lease changes nothing.
func (f *fakeBroker) endLease(p, lease string, status AckStatus) {
	if lease == "" || f.leased[p] != lease {
		return
	}
	switch {
	case status == StatusCompleted, status == StatusDLQ && f.dlqKeeps:
		if f.unacked[p]--; f.unacked[p] > 0 {
			return
		}
	}
	delete(f.leased, p)
	delete(f.unacked, p)
}

// ended says whether lease ran out (leaseFor). Callers hold mu.
func (f *fakeBroker) ended(lease string) bool {
	end, ok := f.expires[lease]
	return ok && !time.Now().Before(end)
}

// holdsLease says whether lease holds a partition. Callers hold mu.
func (f *fakeBroker) holdsLease(lease string) bool {
	if f.ended(lease) {
		return false
	}
	for _, l := range f.leased {
		if l == lease {
			return true
		}
	}
	return false
}

// retryRule fails with the next of f.ruleErrs, or answers the test's
// rule (f.rule), or a view without retryLimit when it set none: the
// engine then sends failed, for the broker to count.
func (f *fakeBroker) retryRule(context.Context, *Message) (retryRule, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ruleReads++
	if len(f.ruleErrs) > 0 {
		err := f.ruleErrs[0]
		f.ruleErrs = f.ruleErrs[1:]
		return retryRule{}, err
	}
	if f.rule == nil {
		return retryRule{}, errNoRetryLimit
	}
	return *f.rule, nil
}

func (f *fakeBroker) renew(ctx context.Context, leaseID string, secs int) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renews[leaseID]++
	if gate := f.renewGate; gate != nil {
		f.mu.Unlock()
		select {
		case <-gate:
		case <-ctx.Done():
		}
		f.mu.Lock()
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
	}
	if f.renewEr != nil {
		return false, f.renewEr
	}
	alive := !f.lost[leaseID] && f.holdsLease(leaseID)
	if end, ok := f.expires[leaseID]; ok && alive && time.Now().Add(time.Duration(secs)*time.Second).After(end) {
		f.expires[leaseID] = time.Now().Add(time.Duration(secs) * time.Second)
	}
	return alive, nil
}

// left is every message not retired, by key, partition after partition.
func (f *fakeBroker) left() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, p := range f.order {
		for _, m := range f.parts[p] {
			out = append(out, m.TransactionID)
		}
	}
	return out
}

// nowaitsNow is f.nowaits so far: whether each pop was one that does not
// wait.
func (f *fakeBroker) nowaitsNow() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.nowaits)
}

func (f *fakeBroker) settles() [][]Settlement {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.acks)
}

// statuses flattens settles to "key:status" strings.
func statuses(settles [][]Settlement) []string {
	var out []string
	for _, s := range settles {
		for _, a := range s {
			out = append(out, a.Message.TransactionID+":"+string(a.Status))
		}
	}
	return out
}

// syncBuf is a log sink safe for concurrent use.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testEngine is an engine over f with a per-message handler h (or set
// handleBatch after), logging to the returned buffer.
func testEngine(t testing.TB, ctx context.Context, f *fakeBroker, cfg engineConfig, limit int,
	h func(context.Context, *Message) error) (*engine, *syncBuf) {
	t.Helper()
	if cfg.slots == 0 {
		cfg.slots = 1
	}
	if cfg.want == 0 {
		cfg.want = f.batch
	}
	cfg.queue = "q"
	logs := &syncBuf{}
	e := newEngine(ctx, nil, f, cfg, limit, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	e.cfg.retry = RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond}
	e.on.handle = h
	return e, logs
}

// runEngine runs e and fails t if it has not returned within 30 s (a hang
// guard, no measurement; on the bubble's clock inside synctest.Test).
func runEngine(t *testing.T, e *engine) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- e.run() }()
	select {
	case err := <-done:
		if n := e.st.occupying; n != 0 {
			t.Errorf("the loop ended with %d parts counted as occupying a handler", n)
		}
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the engine did not stop within 30 s")
		return nil
	}
}

// BenchmarkEngineAlone is the engine's own cost per message, the fake
// broker's included and no HTTP: what the loop adds to the requests; and
// req/1000msg, its pops, acks and renewals per 1,000 messages, which must
// not grow with Concurrency (1, 16) or the partitions (4, 32).
//
//	go test -run '^$' -bench EngineAlone -benchtime 20000x .
func BenchmarkEngineAlone(b *testing.B) {
	for _, batch := range []int{100, 1} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			benchEngine(b, batch, 1, 1)
		})
	}
	for _, conc := range []int{1, 16} {
		for _, parts := range []int{4, 32} {
			b.Run(fmt.Sprintf("batch=100/conc=%d/parts=%d", conc, parts), func(b *testing.B) {
				benchEngine(b, 100, conc, parts)
			})
		}
	}
}

// benchEngine consumes b.N messages spread over parts partitions of a
// fake broker with Concurrency conc.
func benchEngine(b *testing.B, batch, conc, parts int) {
	f := newFakeBroker(batch)
	for p := range parts {
		f.add(fmt.Sprintf("p%d", p), b.N/parts+min(1, max(0, b.N%parts-p)))
	}
	e, _ := testEngine(b, context.Background(), f, engineConfig{each: true, slots: conc}, b.N,
		func(context.Context, *Message) error { return nil })
	b.ReportAllocs()
	b.ResetTimer()
	if err := e.run(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	f.mu.Lock()
	n := len(f.pops) + len(f.acks)
	for _, k := range f.renews {
		n += k
	}
	f.mu.Unlock()
	b.ReportMetric(1000*float64(n)/float64(b.N), "req/1000msg")
}
