package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/internal/transport"
	"github.com/queen-go/queen/queentest"
)

// TestClusterNodeLoss: a client of a 3-node queentest cluster (one broker
// state, as 0.15.1 brokers over one PostgreSQL; the run's profile) with
// the default Affinity. Consume loops of 30 queues read 3 rounds of
// messages: each node serves the pushes whose keys it owns (transport.Owner)
// and pops of the queues it owns, one at least; the node serving the most
// pops is stopped mid-run, and its share moves to the others with nothing
// lost and nothing handled twice (a pop cut with its node comes back after
// its 2 s lease); resumed, it serves again once its pause is over. It runs
// in process whatever the backend.
func TestClusterNodeLoss(t *testing.T) {
	t.Parallel()
	profile := be.profile
	if profile == "" {
		profile = queentest.Profile2x
	}
	cluster := queentest.StartCluster(t, 3, queentest.WithProfile(profile))
	urls := cluster.URLs()
	c, err := queen.New(urls[0], append(clientOpts(), queen.WithURLs(urls[1:]...))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })

	// 30 queues, the first 3 chosen so that each node owns the pops of one
	// and a partition's pushes (the client's keys "queue:*:group" and
	// "queue:partition", see the root's TestRoutingKeys).
	const queues, parts, per = 30, 2, 3
	const round = queues * parts * per
	ownerOf := func(key string) int {
		t.Helper()
		i, err := transport.Owner(urls, key)
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	names := make([]string, 0, queues)
	for node := range urls {
		for k := 0; len(names) == node; k++ {
			if k == 1000 {
				t.Fatalf("no queue of 1000 whose pops and p0 pushes node %d owns", node)
			}
			q := unique(fmt.Sprintf("cluster%d", k))
			if ownerOf(q+":*:g") == node && ownerOf(q+":p0") == node {
				names = append(names, q)
			}
		}
	}
	for len(names) < queues {
		names = append(names, unique(fmt.Sprintf("cluster%d", len(names))))
	}
	wantPushes := make([]int, len(urls)) // per node, in a round
	lease := 2 * time.Second
	for _, q := range names {
		newQueue(t, c, q, queen.QueueConfig{LeaseTime: &lease})
		for p := range parts {
			wantPushes[ownerOf(fmt.Sprintf("%s:p%d", q, p))]++
		}
	}

	var (
		mu      sync.Mutex
		handled = map[string]int{}
		halfway = make(chan struct{})
		once    sync.Once
	)
	handler := func(_ context.Context, m *queen.Message) error {
		key := fmt.Sprintf("%s/%d", m.Queue, msgNum(m))
		mu.Lock()
		defer mu.Unlock()
		handled[key]++
		if handled[key] > 1 {
			t.Errorf("%s handled %d times", key, handled[key])
		}
		if len(handled) == round/2 {
			once.Do(func() { close(halfway) })
		}
		return nil
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(handled)
	}
	waitFor := func(n int, what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for count() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d of %d messages handled", what, count(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	pushRound := func(r int) {
		t.Helper()
		for _, q := range names {
			for p := range parts {
				push(t, c, q, fmt.Sprintf("p%d", p), numbered(r*1000+p*per, per, nil)...)
			}
		}
	}
	requests := func(s *queentest.Server) int {
		return s.Requests(queentest.RoutePush) + s.Requests(queentest.RoutePop) + s.Requests(queentest.RouteAckBatch) +
			s.Requests(queentest.RouteAck)
	}

	ctx, cancel := context.WithCancel(testCtx(t))
	var loops sync.WaitGroup
	for _, q := range names {
		loops.Go(func() {
			err := c.Queue(q).Group("g").SubscriptionMode(queen.SubscriptionModeAll).Batch(2).
				Consume(ctx, handler).Execute(ctx)
			if err != nil && ctx.Err() == nil {
				t.Errorf("consume %s: %v", q, err)
			}
		})
	}
	defer func() {
		cancel()
		loops.Wait()
	}()

	pushRound(0)
	<-halfway
	pops := make([]int, 3)
	owner := 0
	for i, s := range cluster.Nodes() {
		pops[i] = s.Requests(queentest.RoutePop)
		if pops[i] > pops[owner] {
			owner = i
		}
		if s.Requests(queentest.RoutePush) != wantPushes[i] || pops[i] == 0 {
			t.Errorf("node %d served %d pushes (want %d, the keys it owns) and %d pops (want some: it owns a queue)",
				i, s.Requests(queentest.RoutePush), wantPushes[i], pops[i])
		}
	}
	down := cluster.Node(owner)
	down.Stop()
	t.Logf("pops per node %v; node %d stopped", pops, owner)
	waitFor(round, "round 0, a node stopped mid-run")
	pushRound(1)
	waitFor(2*round, "round 1, the node down")

	before := requests(down)
	if err := down.Resume(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * clientOpts2Pause) // the client's pause for the node ends
	pushRound(2)
	waitFor(3*round, "round 2, the node back")
	deadline := time.Now().Add(10 * time.Second)
	for down.Requests(queentest.RoutePop) <= pops[owner] && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if requests(down) <= before || down.Requests(queentest.RoutePop) <= pops[owner] {
		t.Errorf("node %d back: %d requests (%d before), %d pops (%d before the stop): it serves no share again",
			owner, requests(down), before, down.Requests(queentest.RoutePop), pops[owner])
	}
	mu.Lock()
	defer mu.Unlock()
	if len(handled) != 3*round {
		t.Errorf("%d messages handled, want %d", len(handled), 3*round)
	}
}

// clientOpts2Pause is the FailoverPause of clientOpts.
const clientOpts2Pause = 100 * time.Millisecond
