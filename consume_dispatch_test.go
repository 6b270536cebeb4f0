package queen

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestSplitPartitions(t *testing.T) {
	m := func(p string, i int) *Message {
		return &Message{PartitionID: p, Partition: p, Queue: "q", TransactionID: fmt.Sprintf("%s/%d", p, i)}
	}
	msgs := []*Message{m("a", 0), m("a", 1), m("b", 0), m("a", 2), m("c", 0), m("b", 1)}
	var got [][]string
	for _, part := range splitPartitions(msgs) {
		var ks []string
		for _, x := range part {
			ks = append(ks, x.TransactionID)
		}
		got = append(got, ks)
	}
	want := [][]string{{"a/0", "a/1", "a/2"}, {"b/0", "b/1"}, {"c/0"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("split %v, want %v", got, want)
	}
	var order []string
	for _, x := range msgs {
		order = append(order, x.TransactionID)
	}
	if want := []string{"a/0", "a/1", "b/0", "a/2", "c/0", "b/1"}; !reflect.DeepEqual(order, want) {
		t.Fatalf("the pop's messages became %v, want them untouched: %v", order, want)
	}
}

// Concurrency(2) over one pop of three partitions: two handlers at once,
// never two of one partition, each partition in order, and acked in its
// order.
func TestDispatchPartitionsInOrderSideBySide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(100)
		for _, p := range []string{"a", "b", "c"} {
			f.add(p, 4)
		}
		var (
			mu      sync.Mutex
			running = map[string]int{}
			next    = map[string]int{}
			now     int
			most    int
			bad     []string
		)
		e, _ := testEngine(t, context.Background(), f, engineConfig{slots: 2, each: true}, 12,
			func(_ context.Context, m *Message) error {
				p, i := m.PartitionID, m.Data["i"].(int)
				mu.Lock()
				running[p]++
				now++
				most = max(most, now)
				if running[p] > 1 {
					bad = append(bad, "two at once in "+p)
				}
				if next[p] != i {
					bad = append(bad, fmt.Sprintf("%s: %d, want %d", p, i, next[p]))
				}
				next[p] = i + 1
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // the other handler runs meanwhile (on the bubble clock: always)
				mu.Lock()
				running[p]--
				now--
				mu.Unlock()
				return nil
			})
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		if len(bad) > 0 || most != 2 {
			t.Fatalf("violations %v; at most %d handlers at once, want 2", bad, most)
		}
		// Acked as they completed, across requests: each message once,
		// each partition's in order.
		got := map[string][]string{}
		for _, a := range statuses(f.settles()) {
			got[a[:1]] = append(got[a[:1]], a)
		}
		for _, p := range []string{"a", "b", "c"} {
			want := []string{p + "/0:completed", p + "/1:completed", p + "/2:completed", p + "/3:completed"}
			if !reflect.DeepEqual(got[p], want) {
				t.Fatalf("partition %s acked %v, want %v", p, got[p], want)
			}
		}
	})
}

// Without Each, a batch handler gets the whole pop once; its error fails
// each partition's first message and gives back the rest.
func TestDispatchBatchHandlerOncePerPop(t *testing.T) {
	f := newFakeBroker(100)
	f.add("a", 2)
	f.add("b", 1)
	var calls [][]string
	e, _ := testEngine(t, context.Background(), f, engineConfig{}, 6, nil)
	e.on.handleBatch = func(_ context.Context, msgs []*Message) error {
		var ks []string
		for _, m := range msgs {
			ks = append(ks, m.TransactionID)
		}
		calls = append(calls, ks)
		if len(calls) == 1 {
			return errors.New("bulk insert failed")
		}
		return nil
	}
	if err := runEngine(t, e); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || len(calls[0]) != 3 {
		t.Fatalf("calls %v, want the whole pop, then the failed messages again", calls)
	}
	want := []string{"a/0:failed", "a/1:retry", "b/0:failed", "a/0:completed", "a/1:completed", "b/0:completed"}
	if got := statuses(f.settles()); !reflect.DeepEqual(got, want) {
		t.Fatalf("settled %v, want %v", got, want)
	}
}

// A panic is recovered, logged at Error with its stack, and fails the
// message with an error naming its queue, partition and transaction.
func TestDispatchPanicNamesTheMessage(t *testing.T) {
	f := newFakeBroker(1)
	f.add("p", 1)
	e, logs := testEngine(t, context.Background(), f, engineConfig{each: true}, 1,
		func(context.Context, *Message) error { panic("kaboom") })
	if err := runEngine(t, e); err != nil {
		t.Fatal(err)
	}
	acks := f.settles()
	if len(acks) != 1 || acks[0][0].Status != StatusFailed {
		t.Fatalf("settled %v, want p/0 failed", statuses(acks))
	}
	text := acks[0][0].Error
	for _, want := range []string{"panicked", "queue q", "partition p", "transaction p/0", "kaboom"} {
		if !strings.Contains(text, want) {
			t.Errorf("failure text %q lacks %q", text, want)
		}
	}
	out := logs.String()
	if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "consume_dispatch_test.go") {
		t.Fatalf("panic not logged at Error with its stack:\n%s", out)
	}
	if err := e.panicked("v", acks[0][0].Message, "handler"); !errors.Is(err, ErrHandlerPanic) {
		t.Fatalf("%v does not match ErrHandlerPanic", err)
	}
}
