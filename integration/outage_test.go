package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// TestOutageProducerAndConsumeLoop (issue 28): a Producer (one Push per
// message, 8 partitions) and a consume loop (group, Each, Concurrency(4))
// across an outage of 3 s, the broker refusing connections: every message
// is stored or failed with a definite error (ErrNotSent), every partition
// takes pushes after, every stored message is handled, none twice. The
// outage needs the in-process broker (RefuseConnections); on another
// backend the same run goes without it.
func TestOutageProducerAndConsumeLoop(t *testing.T) {
	t.Parallel()
	url := be.url
	var srv *queentest.Server
	if be.srv != nil {
		srv = queentest.Start(t, queentest.WithProfile(be.profile))
		url = srv.URL
	} else {
		t.Logf("broker %s cannot refuse connections on demand: the outage part is left out", be.kind)
	}
	c := newClientAt(t, url, nil)
	ctx := testCtx(t)
	q := unique("outage")
	// A pop whose answer the outage cut leaves its messages leased: they
	// come back when the lease ends.
	newQueue(t, c, q, queen.QueueConfig{LeaseTime: queen.Ptr(5 * time.Second)})

	var mu sync.Mutex
	handled := map[int]int{}
	loopCtx, stop := context.WithCancel(ctx)
	defer stop()
	loopDone := make(chan error, 1)
	go func() {
		loopDone <- c.Queue(q).Group("g").SubscriptionMode(queen.SubscriptionModeAll).
			Concurrency(4).Batch(20).Each().
			Consume(loopCtx, func(_ context.Context, m *queen.Message) error {
				n := num(t, m)
				mu.Lock()
				handled[n]++
				mu.Unlock()
				return nil
			}).Execute(loopCtx)
	}()

	p, err := c.Queue(q).Producer()
	if err != nil {
		t.Fatal(err)
	}
	const n, parts = 1200, 8
	pending := make([]*queen.PendingPush, n)
	for i := range n {
		if srv != nil && i == n/3 {
			srv.RefuseConnections(3 * time.Second)
		}
		pending[i] = p.Partition(fmt.Sprintf("p%d", i%parts)).Push(ctx, map[string]any{"n": i})
		if i%100 == 0 {
			time.Sleep(50 * time.Millisecond) // the pushes span the outage
		}
	}
	var stored []int
	for i, pp := range pending {
		_, err := pp.Wait(ctx)
		switch {
		case err == nil:
			stored = append(stored, i)
		case errors.Is(err, queen.ErrNotSent) && !errors.Is(err, queen.ErrOutcomeUnknown):
			t.Logf("message %d not sent: %v", i, err)
		default:
			t.Errorf("message %d: %v; want stored, or a definite error", i, err)
		}
	}
	// Every partition takes pushes after the outage.
	for part := range parts {
		i := n + part
		if _, err := p.Partition(fmt.Sprintf("p%d", part)).Push(ctx, map[string]any{"n": i}).Wait(ctx); err != nil {
			t.Errorf("partition p%d after the outage: %v", part, err)
			continue
		}
		stored = append(stored, i)
	}
	if err := p.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	eventually(t, 40*time.Second, "every stored message handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, i := range stored {
			if handled[i] == 0 {
				return false
			}
		}
		return true
	})
	stop()
	if err := <-loopDone; err != nil {
		t.Errorf("Execute: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	var got []int
	for i, k := range handled {
		for range k {
			got = append(got, i)
		}
	}
	checkExactlyOnce(t, "handled", got, 0, len(stored))
	if len(stored) != n+parts {
		t.Errorf("%d of %d stored", len(stored), n+parts)
	}
}
