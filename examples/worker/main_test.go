package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen/queentest"
)

// The worker, on the in-process broker, processes every order and returns
// by itself.
func TestRunProcessesEveryOrder(t *testing.T) {
	t.Setenv("QUEEN_URL", "")
	var out syncBuffer
	done := make(chan error, 1)
	var sum summary
	go func() {
		var err error
		sum, err = run(context.Background(), config{orders: 500, partitions: 4, concurrency: 3}, &out)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second): // a hang guard, no measurement
		t.Fatal("the worker did not finish by itself")
	}
	if sum.processed != 500 || sum.duplicates != 0 || sum.leased != 0 || sum.stopped {
		t.Fatalf("summary %+v", sum)
	}
	if !strings.Contains(out.String(), "all orders processed") {
		t.Fatalf("no final summary:\n%s", out.String())
	}
}

// A stop in the middle (what Ctrl-C or SIGTERM does) returns at once with
// nothing lost: every order is either processed or still in the queue for
// the group, and none is leased.
func TestRunStopsCleanly(t *testing.T) {
	t.Setenv("QUEEN_URL", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := syncBuffer{onLine: func(line string) {
		if strings.HasPrefix(line, "[") { // the first progress line: mid-run
			cancel()
		}
	}}
	// 5000 orders of 2 ms on 4 handlers take at least 2.5 s (timers: a
	// slow machine only makes it longer), so the stop at the first progress
	// line (250 ms) is always mid-run.
	const orders = 5000
	done := make(chan error, 1)
	var sum summary
	go func() {
		var err error
		sum, err = run(ctx, config{orders: orders, partitions: 8, concurrency: 4, work: 2 * time.Millisecond}, &out)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
	case <-time.After(60 * time.Second): // a hang guard: pushing and counting included
		t.Fatal("the worker did not stop")
	}
	if !sum.stopped || sum.processed == 0 || sum.processed == orders {
		t.Fatalf("summary %+v: want a stop in the middle\n%s", sum, out.String())
	}
	if sum.processed+sum.left != orders || sum.leased != 0 || sum.duplicates != 0 {
		t.Fatalf("summary %+v: orders lost or leased\n%s", sum, out.String())
	}
	if !strings.Contains(out.String(), "none lost") {
		t.Fatalf("no summary of the stop:\n%s", out.String())
	}
}

// syncBuffer collects the worker's output from its goroutines and calls
// onLine for each line written.
type syncBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	onLine func(string)
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	n, err := b.buf.Write(p)
	f := b.onLine
	b.mu.Unlock()
	if f != nil {
		f(string(p))
	}
	return n, err
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// QUEEN_URL may list the brokers of a cluster: the worker uses them all
// (its queue's pushes spread by partition, over every broker here).
func TestRunOnACluster(t *testing.T) {
	c := queentest.StartCluster(t, 3)
	t.Setenv("QUEEN_URL", strings.Join(c.URLs(), ","))
	sum, err := run(context.Background(), config{orders: 300, partitions: 24, concurrency: 3}, &syncBuffer{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.processed != 300 || sum.duplicates != 0 {
		t.Fatalf("summary %+v", sum)
	}
	// One push per partition, 24 over 3 brokers: all on one broker with
	// p = 3·(1/3)^24 ≈ 1e-11.
	pushedTo := 0
	for _, s := range c.Nodes() {
		if s.Requests(queentest.RoutePush) > 0 {
			pushedTo++
		}
	}
	if pushedTo < 2 {
		t.Errorf("the pushes went to %d broker(s) of 3", pushedTo)
	}
}
