package queen_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// readPartition pops up to n messages of partition for group, acking them
// when ack.
func readPartition(t *testing.T, c *queen.Client, queue, partition, group string, n int, ack bool) []*queen.Message {
	t.Helper()
	msgs, err := c.Queue(queue).Group(group).SubscriptionMode(queen.SubscriptionModeAll).Partition(partition).Batch(n).Wait(false).Pop(t.Context())
	if err != nil || len(msgs) != n {
		t.Fatalf("pop %s: %d messages, %v; want %d", partition, len(msgs), err, n)
	}
	if ack {
		ackAll(t, c, msgs, group)
	}
	return msgs
}

func lagString(l queen.GroupLag) string {
	s := fmt.Sprint(l.Pending)
	for _, p := range l.Partitions {
		s += fmt.Sprintf(" %s:%d", p.Partition, p.Pending)
	}
	return s
}

// A group's lag counts every partition: the one it read, the one it holds
// leased messages of, and the one it never read, on both generations.
func TestQueentestLagCountsEveryPartition(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			_, c := newBroker(t, queentest.WithProfile(p))
			ctx := t.Context()
			mustPush(t, c, "orders", "a", 1, 2, 3)
			mustPush(t, c, "orders", "b", 4, 5)
			mustPush(t, c, "orders", "c", 6, 7, 8, 9)

			l, err := c.Admin().Lag(ctx, "orders", "billing")
			if err != nil || lagString(l) != "9 a:3 b:2 c:4" || l.Drained() {
				t.Fatalf("lag of a group that read nothing: %s, %v", lagString(l), err)
			}
			readPartition(t, c, "orders", "a", "billing", 3, true)
			readPartition(t, c, "orders", "b", "billing", 1, false) // leased, not settled
			l, err = c.Admin().Lag(ctx, "orders", "billing")
			if err != nil || lagString(l) != "6 a:0 b:2 c:4" || l.Queue != "orders" || l.Group != "billing" {
				t.Fatalf("lag: %s (%+v), %v; want 6 a:0 b:2 c:4", lagString(l), l, err)
			}
			for _, pl := range l.Partitions {
				if pl.Estimated != (p == queentest.Profile015 && pl.Partition == "c") {
					t.Errorf("partition %s: Estimated %v", pl.Partition, pl.Estimated)
				}
			}

			readPartition(t, c, "orders", "a", "", 3, true) // queue mode
			if l, err := c.Admin().Lag(ctx, "orders", ""); err != nil || l.Pending != 6 || l.Group != "__QUEUE_MODE__" {
				t.Fatalf("queue mode: %s, %v", lagString(l), err)
			}
			if _, err := c.Admin().Lag(ctx, "nope", "billing"); !errors.Is(err, queen.ErrQueueNotFound) {
				t.Fatalf("unknown queue: %v", err)
			}
			if _, err := c.Admin().Lag(ctx, "orders", "a/b"); !errors.Is(err, queen.ErrInvalidName) {
				t.Fatalf("bad group name: %v", err)
			}
		})
	}
}

// AwaitDrained returns at the first look after the group settled its last
// message, partitions it had never read included, and not before; looks
// that fail for a passing reason are taken again. On a bubble's clock.
func TestAwaitDrained(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := bubbleEnv(t, queentest.WithProfile(p))
				c := e.c
				mustPush(t, c, "orders", "a", 1, 2)
				mustPush(t, c, "orders", "b", 3)
				type result struct {
					l   queen.GroupLag
					err error
					at  time.Time
				}
				done := make(chan result, 1)
				start := time.Now()
				go func() {
					l, err := c.Admin().AwaitDrained(t.Context(), "orders", "billing", queen.DrainOptions{Interval: 2 * time.Second})
					done <- result{l, err, time.Now()}
				}()
				stillWaiting := func(what string) {
					t.Helper()
					time.Sleep(5 * time.Second)
					synctest.Wait()
					select {
					case r := <-done:
						t.Fatalf("%s: returned %s, %v", what, lagString(r.l), r.err)
					default:
					}
				}
				stillWaiting("nothing read")
				readPartition(t, c, "orders", "a", "billing", 2, true)
				stillWaiting("b never read")
				// Two looks fail after their retries; the wait goes on.
				e.srv.FailNext(queentest.RouteQueues, 8, 503, 0)
				readPartition(t, c, "orders", "b", "billing", 1, true)
				r := <-done
				if r.err != nil || !r.l.Drained() || lagString(r.l) != "0 a:0 b:0" {
					t.Fatalf("drained: %s, %v", lagString(r.l), r.err)
				}
				if n := strings.Count(e.logs.String(), "lag look failed"); n != 2 {
					t.Fatalf("%d failed looks logged, want 2:\n%s", n, e.logs.String())
				}
				if r.at.Sub(start) < 10*time.Second {
					t.Fatalf("returned %v after the start", r.at.Sub(start))
				}
			})
		})
	}
}

// AwaitDrained ends with ctx, returning the last lag seen; an error that
// will not pass ends it at once.
func TestAwaitDrainedEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := bubbleEnv(t)
		mustPush(t, e.c, "orders", "a", 1, 2)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		l, err := e.c.Admin().AwaitDrained(ctx, "orders", "billing", queen.DrainOptions{})
		if !errors.Is(err, context.DeadlineExceeded) || l.Pending != 2 {
			t.Fatalf("at the deadline: %s, %v", lagString(l), err)
		}
		if _, err := e.c.Admin().AwaitDrained(t.Context(), "nope", "billing", queen.DrainOptions{}); !errors.Is(err, queen.ErrQueueNotFound) {
			t.Fatalf("unknown queue: %v", err)
		}
		if _, err := e.c.Admin().AwaitDrained(t.Context(), "orders", "billing", queen.DrainOptions{Interval: -time.Second}); !errors.Is(err, queen.ErrInvalidOption) {
			t.Fatalf("negative interval: %v", err)
		}
	})
}

// A group in mode new (the client's default) that registered after two
// partitions' messages never reads them: its lag there is 0 and its wait
// for a drain ends, on both generations, though a 2.x broker has no cursor
// row for it on those partitions (its depth view counts them from their
// first message). A message pushed there after the group started is
// pending until the group reads it.
func TestQueentestLagOfAModeNewGroup(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			clock := queentest.NewFakeClock(time.Date(2026, 10, 21, 12, 0, 0, 0, time.UTC))
			_, c := newBroker(t, queentest.WithProfile(p), queentest.WithClock(clock))
			ctx := t.Context()
			mustPush(t, c, "orders", "old1", 1, 2, 3)
			mustPush(t, c, "orders", "old2", 4, 5)
			clock.Advance(time.Second)
			g := c.Queue("orders").Group("g").Batch(10).Wait(false) // mode new: the default
			if msgs, err := g.Pop(ctx); err != nil || len(msgs) != 0 {
				t.Fatalf("first pop: %d messages, %v; want none", len(msgs), err)
			}
			clock.Advance(time.Second)
			mustPush(t, c, "orders", "fresh", 6, 7)
			readNew := func(want int) {
				t.Helper()
				var got []*queen.Message
				for range 5 {
					msgs, err := g.Pop(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if len(msgs) > 0 {
						ackAll(t, c, msgs, "g")
					}
					got = append(got, msgs...)
				}
				if len(got) != want {
					t.Fatalf("read %v, want %d messages", payloads(got), want)
				}
			}
			readNew(2)

			l, err := c.Admin().Lag(ctx, "orders", "g")
			if err != nil || !l.Drained() || lagString(l) != "0 fresh:0 old1:0 old2:0" {
				t.Fatalf("lag: %s, %v; want 0 fresh:0 old1:0 old2:0", lagString(l), err)
			}
			bounded, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if l, err := c.Admin().AwaitDrained(bounded, "orders", "g", queen.DrainOptions{Interval: time.Millisecond}); err != nil || !l.Drained() {
				t.Fatalf("AwaitDrained: %s, %v", lagString(l), err)
			}

			clock.Advance(time.Second)
			mustPush(t, c, "orders", "old1", 8)
			l, err = c.Admin().Lag(ctx, "orders", "g")
			if err != nil || l.Drained() || l.Partitions[1].Partition != "old1" || l.Partitions[1].Pending < 1 {
				t.Fatalf("lag after a push to old1: %s, %v; want old1 pending", lagString(l), err)
			}
			readNew(1)
			if l, err := c.Admin().Lag(ctx, "orders", "g"); err != nil || lagString(l) != "0 fresh:0 old1:0 old2:0" {
				t.Fatalf("lag after reading it: %s, %v", lagString(l), err)
			}
		})
	}
}

// On 0.15.1 a partition the group has no position on is counted from the
// broker's statistics, which may be old when the refresh is refused (no
// admin rights): AwaitDrained does not report a drain that rests on them.
// It looks again until its ctx ends, with an error that says why, and
// returns once a refresh is granted. Here the queue's empty Default
// partition, which the group never read, is such a partition. On the
// bubble's clock.
func TestAwaitDrained015WaitsForFreshStatistics(t *testing.T) {
	srv := queentest.NewServer(queentest.WithProfile(queentest.Profile015))
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		rt := &faulty{srv: srv}
		c, err := queen.New(srv.URL, queen.WithHTTPClient(&http.Client{Transport: rt}),
			queen.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		ctx := context.Background()
		if _, err := c.Queue("orders").Create().Execute(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Queue("orders").Partition("a").Push(1, 2).Execute(ctx); err != nil {
			t.Fatal(err)
		}
		msgs, err := c.Queue("orders").Group("billing").SubscriptionMode(queen.SubscriptionModeAll).Partition("a").Batch(2).Wait(false).Pop(ctx)
		if err != nil || len(msgs) != 2 {
			t.Fatalf("pop: %d, %v", len(msgs), err)
		}
		acks := []queen.Settlement{{Message: msgs[0], Status: queen.StatusCompleted}, {Message: msgs[1], Status: queen.StatusCompleted}}
		if _, err := c.SettleBatch(ctx, acks, queen.AckOptions{ConsumerGroup: "billing"}); err != nil {
			t.Fatal(err)
		}

		rt.set("/api/v1/stats/refresh", &fault{status: http.StatusForbidden})
		bounded, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := c.Admin().AwaitDrained(bounded, "orders", "billing", queen.DrainOptions{Interval: time.Second})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "statistics") {
			t.Fatalf("refresh refused: %s, %v; want the deadline, saying the statistics could not be refreshed", lagString(l), err)
		}
		rt.set("", nil)
		if l, err := c.Admin().AwaitDrained(ctx, "orders", "billing", queen.DrainOptions{Interval: time.Second}); err != nil || lagString(l) != "0 Default:0 a:0" {
			t.Fatalf("refresh granted: %s, %v", lagString(l), err)
		}
	})
}
