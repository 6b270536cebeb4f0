package queen

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On a 0.15.1 broker a group's start point travels only until the group
// is registered: the first pop asks the broker whether the group exists on
// the queue; once a pop was answered the start point is never sent again
// (PROTOCOL.md §16: there, subscriptionMode=new on a registered group can
// skip messages). A start time is the exception: it goes on every pop.
func TestSubscriptionOnlyOnTheRegisteringPop(t *testing.T) {
	for _, tt := range []struct {
		name  string
		build func(c *Client) *QueueBuilder
		mode  string
		from  string
		every bool
	}{
		{"unset mode: new", func(c *Client) *QueueBuilder { return c.Queue("orders").Group("g") }, "new", "", false},
		{"all", func(c *Client) *QueueBuilder {
			return c.Queue("orders").Group("g").SubscriptionMode(SubscriptionModeAll)
		}, "all", "", false},
		{"from now", func(c *Client) *QueueBuilder {
			return c.Queue("orders").Group("g").SubscriptionFrom("now")
		}, "all", "now", false},
		{"from a time", func(c *Client) *QueueBuilder {
			return c.Queue("orders").Group("g").SubscriptionFrom("2026-10-22T00:00:00Z")
		}, "all", "2026-10-22T00:00:00Z", true},
		{"from a time, pinned", func(c *Client) *QueueBuilder {
			return c.Queue("orders").Partition("p1").Group("g").SubscriptionFrom("2026-10-22T00:00:00Z")
		}, "all", "2026-10-22T00:00:00Z", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec, c := newRecorder(t) // the group is unknown (404), pops are empty
			rec.health = &health015
			ctx := context.Background()
			for range 3 {
				_, err := tt.build(c).Pop(ctx)
				require.NoError(t, err)
			}
			reqs := rec.all()
			require.Len(t, reqs, 3)
			assert.Equal(t, tt.mode, reqs[0].Query.Get("subscriptionMode"), "registering pop")
			assert.Equal(t, tt.from, reqs[0].Query.Get("subscriptionFrom"), "registering pop")
			for _, r := range reqs[1:] {
				if tt.every {
					assert.Equal(t, tt.from, r.Query.Get("subscriptionFrom"), "a start time goes on every pop: %s", r.RawQuery)
					continue
				}
				assert.False(t, r.Query.Has("subscriptionMode"), "pop of a registered group: %s", r.RawQuery)
				assert.False(t, r.Query.Has("subscriptionFrom"), "pop of a registered group: %s", r.RawQuery)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			require.Len(t, rec.lookups, 1, "one lookup, before the first pop")
			assert.Equal(t, "/api/v1/consumer-groups/g", rec.lookups[0].Path)
			assert.Equal(t, 1, rec.healths, "the generation is asked once")
		})
	}
}

// On 0.15.1, once a pop that carried a start time was answered, only the
// pops that carry that same time go on carrying it: a pop naming "new" (or
// nothing, which sends "new") or another time carries no start point, as
// for a registered group.
func TestSubscriptionStartTimeKeepsOnlyItself(t *testing.T) {
	rec, c := newRecorder(t)
	rec.health = &health015
	ctx := context.Background()
	const ts = "2026-10-22T00:00:00Z"
	for _, qb := range []*QueueBuilder{
		c.Queue("orders").Partition("p1").Group("g").SubscriptionFrom(ts),
		c.Queue("orders").Partition("p2").Group("g"),
		c.Queue("orders").Group("g").SubscriptionFrom("2026-10-23T00:00:00Z"),
		c.Queue("orders").Group("g").SubscriptionFrom("now"),
		c.Queue("orders").Partition("p2").Group("g").SubscriptionMode(SubscriptionModeNew).SubscriptionFrom(ts),
	} {
		_, err := qb.Pop(ctx)
		require.NoError(t, err)
	}
	reqs := rec.all()
	require.Len(t, reqs, 5)
	assert.Equal(t, ts, reqs[0].Query.Get("subscriptionFrom"))
	for _, r := range reqs[1:4] {
		assert.False(t, r.Query.Has("subscriptionMode"), r.RawQuery)
		assert.False(t, r.Query.Has("subscriptionFrom"), r.RawQuery)
	}
	assert.Equal(t, ts, reqs[4].Query.Get("subscriptionFrom"))
	assert.Equal(t, "new", reqs[4].Query.Get("subscriptionMode"), "the pop's own mode (the broker reads the time first)")
}

// On a 2.x broker every pop of a group carries its start point, pinned or
// queue-wide, and the group view is never asked: the broker keeps the
// policy of the pop that registered the group, and a pinned pop registers
// nothing (so the start point must reach the next partition too).
func TestSubscriptionOnEveryPopOf2x(t *testing.T) {
	for _, tt := range []struct {
		name       string
		build      func(c *Client) *QueueBuilder
		mode, from string
	}{
		{"unset mode: new", func(c *Client) *QueueBuilder { return c.Queue("orders").Group("g") }, "new", ""},
		{"all, pinned", func(c *Client) *QueueBuilder {
			return c.Queue("orders").Partition("p1").Group("g").SubscriptionMode(SubscriptionModeAll)
		}, "all", ""},
		{"from a time", func(c *Client) *QueueBuilder {
			return c.Queue("orders").Group("g").SubscriptionFrom("2026-10-22T00:00:00Z")
		}, "all", "2026-10-22T00:00:00Z"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec, c := newRecorder(t, answer{status: http.StatusNoContent})
			rec.lookup = &answer{status: http.StatusOK, body: `{"orders":{"conflation":false,"kind":"queen","partitions":[{"partition":"p1","offsetLag":0}]}}`}
			for range 3 {
				_, err := tt.build(c).Pop(context.Background())
				require.NoError(t, err)
			}
			_, err := c.Queue("orders").Partition("p2").Group("g").SubscriptionMode(SubscriptionModeAll).Pop(context.Background())
			require.NoError(t, err)
			reqs := rec.all()
			require.Len(t, reqs, 4)
			for _, r := range reqs[:3] {
				assert.Equal(t, tt.mode, r.Query.Get("subscriptionMode"), r.RawQuery)
				assert.Equal(t, tt.from, r.Query.Get("subscriptionFrom"), r.RawQuery)
			}
			assert.Equal(t, "all", reqs[3].Query.Get("subscriptionMode"), "another partition: %s", reqs[3].RawQuery)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			assert.Empty(t, rec.lookups, "the group view lists cursors, not registrations: not asked")
			assert.Equal(t, 1, rec.healths)
		})
	}
}

// When the broker's generation cannot be learned, a pop that would carry a
// start point is not sent: on one generation leaving it out skips
// messages, on the other sending it does.
func TestSubscriptionGenerationFailureFailsThePop(t *testing.T) {
	rec, c := newRecorder(t)
	rec.health = &answer{status: http.StatusOK, body: `<html>not a broker</html>`}
	_, err := c.Queue("orders").Group("g").Pop(context.Background())
	var be *BrokerError
	require.ErrorAs(t, err, &be)
	assert.Contains(t, err.Error(), `consumer group "g" of queue "orders"`)
	assert.Contains(t, err.Error(), "GET /health")
	assert.Zero(t, rec.hits(), "no pop sent")
	// Queue mode has no start point and needs no generation.
	_, err = c.Queue("orders").Pop(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, rec.hits())
}

// A group that already has a position on the queue (another process
// registered it) never gets a start point, from the first pop on.
func TestSubscriptionNotSentForAnExistingGroup(t *testing.T) {
	for name, body := range map[string]string{
		"2.x-shaped detail": `{"orders":{"conflation":false,"kind":"queen","partitions":[{"partition":"Default","offsetLag":0}]}}`,
		"0.15.1 detail":     `{"orders":{"partitions":[{"partition":"p1","workerId":null,"offsetLag":3}]},"other":{"partitions":[]}}`,
	} {
		t.Run(name, func(t *testing.T) {
			rec, c := newRecorder(t)
			rec.health = &health015
			rec.lookup = &answer{status: http.StatusOK, body: body}
			for range 2 {
				_, err := c.Queue("orders").Group("g").SubscriptionMode(SubscriptionModeNew).Pop(context.Background())
				require.NoError(t, err)
			}
			for _, r := range rec.all() {
				assert.False(t, r.Query.Has("subscriptionMode"), r.RawQuery)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			assert.Len(t, rec.lookups, 1)
		})
	}
}

// The group exists on another queue only, or the broker answers null
// (0.15.1 for a group it does not know): the pop registers it.
func TestSubscriptionSentWhenTheGroupIsElsewhere(t *testing.T) {
	for name, body := range map[string]string{
		"other queue": `{"invoices":{"partitions":[]}}`,
		"null":        `null`,
		"empty":       `{}`,
	} {
		t.Run(name, func(t *testing.T) {
			rec, c := newRecorder(t)
			rec.health = &health015
			rec.lookup = &answer{status: http.StatusOK, body: body}
			_, err := c.Queue("orders").Group("g").Pop(context.Background())
			require.NoError(t, err)
			assert.Equal(t, "new", rec.only(t).Query.Get("subscriptionMode"))
		})
	}
}

// When the lookup fails, the pop is not sent: popping without knowing
// could skip messages (or read what the group asked to skip).
func TestSubscriptionLookupFailureFailsThePop(t *testing.T) {
	rec, c := newRecorder(t)
	rec.health = &health015
	rec.lookup = &answer{status: http.StatusUnauthorized, body: `{"error":"Invalid token"}`}
	_, err := c.Queue("orders").Group("g").Pop(context.Background())
	var be *BrokerError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, http.StatusUnauthorized, be.Status)
	assert.Contains(t, err.Error(), `consumer group "g"`)
	assert.Zero(t, rec.hits(), "no pop sent")
}

// Queue mode has no start point: no lookup, no mode.
func TestSubscriptionQueueModeNeverLooksUp(t *testing.T) {
	rec, c := newRecorder(t)
	_, err := c.Queue("orders").Pop(context.Background())
	require.NoError(t, err)
	assert.False(t, rec.only(t).Query.Has("subscriptionMode"))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	assert.Empty(t, rec.lookups)
}

// A failed pop does not register the group: the next pop sends the start
// point again.
func TestSubscriptionFailedPopDoesNotRegister(t *testing.T) {
	rec, c := newRecorder(t,
		answer{status: http.StatusBadRequest, body: `{"error":"bad"}`},
		answer{status: http.StatusNoContent})
	rec.health = &health015
	_, err := c.Queue("orders").Group("g").Pop(context.Background())
	require.Error(t, err)
	_, err = c.Queue("orders").Group("g").Pop(context.Background())
	require.NoError(t, err)
	reqs := rec.all()
	require.Len(t, reqs, 2)
	assert.Equal(t, "new", reqs[1].Query.Get("subscriptionMode"))
}

// A group deleted through Admin is forgotten: its next pop registers it
// anew, with its start point.
func TestSubscriptionForgottenAfterGroupDelete(t *testing.T) {
	rec, c := newRecorder(t)
	rec.health = &health015
	ctx := context.Background()
	_, err := c.Queue("orders").Group("g").Pop(ctx)
	require.NoError(t, err)
	rec.mu.Lock()
	rec.answers = []answer{{status: http.StatusOK, body: `{"success":true,"consumerGroup":"g","deletedPartitions":1,"metadataDeleted":true}`}}
	rec.reqs = nil
	rec.mu.Unlock()
	_, err = c.Admin().DeleteConsumerGroup(ctx, "g", DeleteConsumerGroupOptions{})
	require.NoError(t, err)
	rec.mu.Lock()
	rec.answers = nil
	rec.mu.Unlock()
	_, err = c.Queue("orders").Group("g").Pop(ctx)
	require.NoError(t, err)
	reqs := rec.all()
	require.Len(t, reqs, 2)
	assert.Equal(t, "new", reqs[1].Query.Get("subscriptionMode"))
}

// Pops of several goroutines at a group's start: each pop carries the
// start point or not, never a half; none is sent twice after an answer.
func TestSubscriptionConcurrentFirstPops(t *testing.T) {
	rec, c := newRecorder(t)
	rec.health = &health015
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			_, err := c.Queue("orders").Group("g").Pop(context.Background())
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	_, err := c.Queue("orders").Group("g").Pop(context.Background())
	require.NoError(t, err)
	reqs := rec.all()
	assert.False(t, reqs[len(reqs)-1].Query.Has("subscriptionMode"))
}

// A broker that does not size pops (no autopilot echo on an answer with
// messages: 0.15.1 hands out one message) gets an explicit batch from then
// on, for pops that left it to autopilot; a Batch set by the application
// is never changed.
func TestLegacyBrokerGetsAnExplicitBatch(t *testing.T) {
	rec, c := newRecorder(t, ok200(t, "broker-0.15.1/pop_queue_mode_three.json"), answer{status: http.StatusNoContent})
	ctx := context.Background()
	msgs, err := c.Queue("t1").Pop(ctx)
	require.NoError(t, err)
	require.Len(t, msgs, 3)
	_, err = c.Queue("t1").Pop(ctx)
	require.NoError(t, err)
	_, err = c.Queue("t1").Batch(7).Pop(ctx)
	require.NoError(t, err)
	_, err = c.Queue("t1").Partitions(4).Pop(ctx)
	require.NoError(t, err)
	reqs := rec.all()
	require.Len(t, reqs, 4)
	assert.Equal(t, "true", reqs[0].Query.Get("autopilot"))
	assert.False(t, reqs[0].Query.Has("batch"))
	assert.Equal(t, "100", reqs[1].Query.Get("batch"), reqs[1].RawQuery)
	assert.Equal(t, "true", reqs[1].Query.Get("autopilot"), "the partitions stay left to the broker (PROTOCOL.md 3.3)")
	assert.Equal(t, "7", reqs[2].Query.Get("batch"), "a Batch set by the application is kept")
	assert.Equal(t, "100", reqs[3].Query.Get("batch"), reqs[3].RawQuery)
	assert.Equal(t, "4", reqs[3].Query.Get("partitions"), reqs[3].RawQuery)
	assert.False(t, reqs[3].Query.Has("autopilot"), "both sizes set: no autopilot flag")
}

// A broker that echoes autopilot keeps sizing the pops.
func TestAutopilotBrokerKeepsSizing(t *testing.T) {
	rec, c := newRecorder(t, ok200(t, "broker-2.x/pop_two_partitions_mixed_payloads.json"), answer{status: http.StatusNoContent})
	ctx := context.Background()
	_, err := c.Queue("orders").Pop(ctx)
	require.NoError(t, err)
	_, err = c.Queue("orders").Pop(ctx)
	require.NoError(t, err)
	reqs := rec.all()
	require.Len(t, reqs, 2)
	assert.Equal(t, "true", reqs[1].Query.Get("autopilot"))
	assert.False(t, reqs[1].Query.Has("batch"), reqs[1].RawQuery)
}

// A pop with subscriptionMode=new answered with a claim and no messages
// (0.15.1 moved the cursor) is logged at Warn with the partition.
func TestEmptyClaimIsWarned(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rec, c := newRecorderOpts(t, []Option{WithLogger(log)}, ok200(t, "broker-0.15.1/pop_group_new_first_pop_empty.json"))
	rec.health = &health015
	msgs, err := c.Queue("t4").Group("G2").SubscriptionMode(SubscriptionModeNew).Pop(context.Background())
	require.NoError(t, err)
	assert.Empty(t, msgs)
	assert.Contains(t, buf.String(), "level=WARN")
	assert.Contains(t, buf.String(), "partition=pA")
}

// A real 0.15.1 broker answers a pinned pop of a partition with nothing
// left (queue mode, or a group's pop with no start point or "all") with a
// claim and no messages; nothing moved, and nothing is warned of.
func TestEmptyClaimOfADrainedPartitionIsNotWarned(t *testing.T) {
	for _, tt := range []struct {
		name string
		pops []func(*Client) *QueueBuilder
	}{
		{"queue mode", []func(*Client) *QueueBuilder{func(c *Client) *QueueBuilder { return c.Queue("orders").Partition("a") }}},
		{"group, mode all", []func(*Client) *QueueBuilder{func(c *Client) *QueueBuilder {
			return c.Queue("orders").Partition("a").Group("g").SubscriptionMode(SubscriptionModeAll)
		}}},
		{"registered group", []func(*Client) *QueueBuilder{
			func(c *Client) *QueueBuilder {
				return c.Queue("orders").Partition("a").Group("g").SubscriptionMode(SubscriptionModeAll)
			},
			func(c *Client) *QueueBuilder { return c.Queue("orders").Partition("a").Group("g") },
			func(c *Client) *QueueBuilder {
				return c.Queue("orders").Partition("a").Group("g").SubscriptionMode(SubscriptionModeNew)
			},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
			answers := make([]answer, len(tt.pops))
			for i := range answers {
				answers[i] = ok200(t, "broker-0.15.1/pop_pinned_drained.json")
			}
			rec, c := newRecorderOpts(t, []Option{WithLogger(log)}, answers...)
			rec.health = &health015
			for _, qb := range tt.pops {
				msgs, err := qb(c).Wait(false).Pop(context.Background())
				require.NoError(t, err)
				assert.Empty(t, msgs)
			}
			assert.Empty(t, buf.String())
		})
	}
}

// errors.Is reaches the lookup's cause through the wrapping.
func TestSubscriptionLookupErrorWraps(t *testing.T) {
	rec, c := newRecorder(t)
	rec.health = &health015
	rec.lookup = &answer{status: http.StatusForbidden, body: `{"error":"Insufficient permissions"}`}
	_, err := c.Queue("orders").Group("g").Pop(context.Background())
	var be *BrokerError
	require.True(t, errors.As(err, &be))
	assert.Equal(t, "Insufficient permissions", be.Message)
}

// On 2.x, once a pinned pop of a group in mode new is answered, every later
// pop of the group, pinned or queue-wide, carries a fixed start time: the
// answer's Date less the time since the group's first pinned pop was sent,
// rounded down to the second (the broker keeps a pinned pop's "new" only in
// memory). Pops with another start point, and groups whose first answered
// pop was queue-wide, are left as they are.
func TestPinnedNewGroupGetsAFixedStartTime(t *testing.T) {
	dated := answer{status: http.StatusNoContent, header: map[string]string{"Date": "Thu, 22 Oct 2026 08:00:05 GMT"}}
	rec, c := newRecorder(t, dated)
	ctx := context.Background()
	g := func(name string) *QueueBuilder { return c.Queue("orders").Group(name) }
	for _, qb := range []*QueueBuilder{
		g("g").Partition("p1"), g("g").Partition("p2"), g("g"),
		g("all").Partition("p1").SubscriptionMode(SubscriptionModeAll), g("all").Partition("p1").SubscriptionMode(SubscriptionModeAll),
		g("wide"), g("wide").Partition("p1"),
		g("now").SubscriptionFrom("now").Partition("p1"), g("now").SubscriptionFrom("now"),
	} {
		_, err := qb.Wait(false).Pop(ctx)
		require.NoError(t, err)
	}
	reqs := rec.all()
	require.Len(t, reqs, 9)
	start := func(r seen) string {
		return "mode=" + r.Query.Get("subscriptionMode") + " from=" + r.Query.Get("subscriptionFrom")
	}
	const fixed = "mode= from=2026-10-22T08:00:04Z"
	assert.Equal(t, []string{
		"mode=new from=", fixed, fixed,
		"mode=all from=", "mode=all from=",
		"mode=new from=", "mode=new from=",
		"mode=all from=now", fixed,
	}, []string{start(reqs[0]), start(reqs[1]), start(reqs[2]), start(reqs[3]), start(reqs[4]),
		start(reqs[5]), start(reqs[6]), start(reqs[7]), start(reqs[8])})

	// A group deleted through the Client starts again: its next pinned pop
	// fixes a new time.
	_, _ = c.Admin().DeleteConsumerGroup(ctx, "g", DeleteConsumerGroupOptions{Queue: "orders"})
	_, err := g("g").Partition("p1").Wait(false).Pop(ctx)
	require.NoError(t, err)
	assert.Equal(t, "mode=new from=", start(rec.all()[len(rec.all())-1]))
}

// The fixed start time is no later than the moment the broker started any
// partition for the group: the Date of the answer, less the time the first
// pinned pop took (a long poll starts its partition when it arrives, and
// is answered up to its wait later), rounded down to the second.
func TestFixedStart(t *testing.T) {
	date := time.Date(2026, 10, 22, 8, 0, 5, 0, time.UTC)
	assert.Equal(t, "2026-10-22T08:00:04Z", fixedStart(date, time.Millisecond))
	assert.Equal(t, "2026-10-22T08:00:05Z", fixedStart(date, 0))
	assert.Equal(t, "2026-10-22T07:59:34Z", fixedStart(date, 30*time.Second+time.Millisecond), "a long poll's wait")
	assert.Equal(t, "2026-10-22T08:00:05Z", fixedStart(date.In(time.FixedZone("x", 3600)), -time.Second), "UTC; a clock that went back counts as no time")
}
