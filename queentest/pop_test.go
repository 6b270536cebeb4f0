package queentest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPopDeliversInOrderWithThe2xFields(t *testing.T) {
	clock := NewFakeClock(t0)
	s := Start(t, WithClock(clock))
	h := newHC(t, s)
	pushed := h.pushN("q", "p1", 5)

	st, _, raw := h.do("GET", "/api/v1/pop/queue/q?batch=3", nil)
	require.Equal(t, http.StatusOK, st)
	var generic map[string]any
	require.NoError(t, json.Unmarshal(raw, &generic))
	for _, k := range []string{"success", "queue", "partition", "partitionId", "leaseId", "consumerGroup", "messages", "partitionsClaimed"} {
		assert.Contains(t, generic, k)
	}
	var p tPop
	require.NoError(t, json.Unmarshal(raw, &p))
	assert.True(t, p.Success)
	assert.Equal(t, "q", p.Queue)
	assert.Equal(t, "p1", p.Partition)
	assert.Equal(t, "__QUEUE_MODE__", p.ConsumerGroup)
	assert.Regexp(t, uuidRE, p.LeaseID)
	assert.Equal(t, 1, p.PartitionsClaimed)
	require.Len(t, p.Messages, 3)
	_, err := strconv.ParseUint(p.PartitionID, 10, 64)
	assert.NoError(t, err, "2.x partition ids are decimal")
	for i, m := range p.Messages {
		assert.Equal(t, pushed[i].MessageID, m.ID)
		assert.Equal(t, pushed[i].TransactionID, m.TransactionID)
		assert.EqualValues(t, i, m.Offset)
		assert.Equal(t, 1, m.DeliveryAttempt)
		assert.Equal(t, p.LeaseID, m.LeaseID)
		assert.Equal(t, p.PartitionID, m.PartitionID)
		assert.Equal(t, "p1", m.Partition)
		assert.Equal(t, "2026-11-30T12:00:00.000Z", m.CreatedAt)
		assert.Nil(t, m.TraceID)
	}
	assert.Equal(t, []int{0, 1, 2}, ns(t, p.Messages))

	// The partition is leased: nobody else in queue mode gets it.
	h.popEmpty("q", nil)
	h.ackAll(&p, "")
	p2 := h.popQ("q", vals("batch", "10"))
	assert.Equal(t, []int{3, 4}, ns(t, p2.Messages))
}

func TestPopEmptyIs204WithoutBody(t *testing.T) {
	h := newHC(t, Start(t))
	st, hdr, raw := h.do("GET", "/api/v1/pop/queue/nothing", nil)
	assert.Equal(t, http.StatusNoContent, st)
	assert.Empty(t, raw)
	assert.Empty(t, hdr.Get("Content-Type"))
	st, _, _ = h.do("GET", "/api/v1/pop/queue/nothing/partition/p", nil)
	assert.Equal(t, http.StatusNoContent, st)
}

// The pop routes read their query with axum's typed Query extractor (2.x
// handlers/data.rs), whose rejection is a plain-text 400, not the JSON error
// envelope.
func TestPopBadQueryIs400(t *testing.T) {
	h := newHC(t, Start(t))
	for _, path := range []string{"/api/v1/pop/queue/q", "/api/v1/pop/queue/q/partition/p", "/api/v1/pop"} {
		for _, q := range []string{"batch=x", "wait=yes", "timeout=-1", "partitions=1.5"} {
			st, hdr, raw := h.do("GET", path+"?namespace=n&"+q, nil)
			assert.Equal(t, http.StatusBadRequest, st, q)
			assert.Equal(t, "text/plain; charset=utf-8", hdr.Get("Content-Type"), q)
			assert.True(t, strings.HasPrefix(string(raw), "Failed to deserialize query string: "), "%s: %s", q, raw)
		}
	}
	// The refusals the handlers write themselves are JSON without a code.
	for _, path := range []string{"/api/v1/pop", "/api/v1/pop/queue/q?conflation=true"} {
		st, _, raw := h.do("GET", path, nil)
		assert.Equal(t, http.StatusBadRequest, st, path)
		var e map[string]any
		require.NoError(t, json.Unmarshal(raw, &e), path)
		assert.Equal(t, false, e["success"], path)
		assert.NotEmpty(t, e["error"], path)
		assert.Equal(t, []any{}, e["messages"], path)
		assert.NotContains(t, e, "code", path)
	}
}

// batch below 1 still claims one message: the 2.x claim takes at least one
// (rsm/consume/pop.rs: budget.max(1)).
func TestPopBatchBelowOneTakesOne(t *testing.T) {
	h := newHC(t, Start(t))
	h.pushN("q", "p", 3)
	p := h.popQ("q", vals("batch", "0"))
	assert.Equal(t, []int{0}, ns(t, p.Messages))
	h.ackAll(p, "")
	p = h.popQ("q", vals("batch", "-5"))
	assert.Equal(t, []int{1}, ns(t, p.Messages))
	h.ackAll(p, "")
	_, p = h.pop("/api/v1/pop/queue/q/partition/p", vals("batch", "0"))
	require.NotNil(t, p)
	assert.Equal(t, []int{2}, ns(t, p.Messages))
}

func TestPopDefaultsBatch200AndOnePartition(t *testing.T) {
	h := newHC(t, Start(t))
	h.pushN("q", "a", 250)
	h.pushN("q", "b", 3)
	p := h.popQ("q", nil)
	assert.Len(t, p.Messages, 200, "batch defaults to 200 without autopilot")
	assert.Equal(t, 1, p.PartitionsClaimed, "partitions defaults to 1")
	assert.Nil(t, p.Autopilot)
}

func TestPopWildcardPartitionsShareBatchBudgetAndOneLease(t *testing.T) {
	h := newHC(t, Start(t))
	for _, part := range []string{"a", "b", "c", "d"} {
		h.pushN("q", part, 4)
	}
	p := h.popQ("q", vals("partitions", "3", "batch", "10"))
	assert.Len(t, p.Messages, 10, "batch is the budget of the whole pop")
	assert.Equal(t, 3, p.PartitionsClaimed)
	parts := map[string]bool{}
	for _, m := range p.Messages {
		assert.Equal(t, p.LeaseID, m.LeaseID, "one leaseId for every partition of the pop")
		parts[m.Partition] = true
	}
	assert.Len(t, parts, 3)

	// The three leased partitions are out of reach; the fourth is not.
	other := h.popQ("q", vals("partitions", "64", "batch", "100"))
	assert.Equal(t, 1, other.PartitionsClaimed)
	assert.NotContains(t, parts, other.Messages[0].Partition)
	assert.NotEqual(t, p.LeaseID, other.LeaseID)

	// partitions is clamped to 64.
	h2 := newHC(t, Start(t))
	for i := 0; i < 70; i++ {
		h2.pushN("w", "p"+strconv.Itoa(i), 1)
	}
	p = h2.popQ("w", vals("partitions", "1000", "batch", "1000"))
	assert.Equal(t, 64, p.PartitionsClaimed)
}

func TestPopPinnedPartition(t *testing.T) {
	h := newHC(t, Start(t))
	h.pushN("q", "a", 2)
	h.pushN("q", "b", 2)
	st, p := h.pop("/api/v1/pop/queue/q/partition/b", vals("batch", "10", "partitions", "5"))
	require.Equal(t, http.StatusOK, st)
	assert.Equal(t, 1, p.PartitionsClaimed)
	for _, m := range p.Messages {
		assert.Equal(t, "b", m.Partition)
	}
	st, _ = h.pop("/api/v1/pop/queue/q/partition/b", nil)
	assert.Equal(t, http.StatusNoContent, st, "b is leased")
	st, _ = h.pop("/api/v1/pop/queue/q/partition/zzz", nil)
	assert.Equal(t, http.StatusNoContent, st, "unknown partition")
	// Path segments are unescaped.
	h.pushN("q", "with/slash", 1)
	st, p = h.pop("/api/v1/pop/queue/q/partition/"+url.PathEscape("with/slash"), nil)
	require.Equal(t, http.StatusOK, st)
	assert.Equal(t, "with/slash", p.Messages[0].Partition)
}

func TestPopDiscoveryByNamespaceAndTask(t *testing.T) {
	h := newHC(t, Start(t))
	h.doJSON("POST", "/api/v1/configure", item{"queue": "billing-a", "namespace": "billing", "task": "invoice"}, http.StatusOK, nil)
	h.doJSON("POST", "/api/v1/configure", item{"queue": "billing-b", "namespace": "billing", "task": "refund"}, http.StatusOK, nil)
	h.doJSON("POST", "/api/v1/configure", item{"queue": "other", "namespace": "ops"}, http.StatusOK, nil)
	h.pushN("billing-a", "", 1)
	h.pushN("billing-b", "", 1)
	h.pushN("other", "", 1)

	st, _, raw := h.do("GET", "/api/v1/pop", nil)
	assert.Equal(t, http.StatusBadRequest, st)
	assert.Contains(t, string(raw), "namespace or task is required")

	st, p := h.pop("/api/v1/pop", vals("namespace", "billing", "partitions", "10", "batch", "10"))
	require.Equal(t, http.StatusOK, st)
	assert.Equal(t, "", p.Queue, "a discovery pop has no single queue")
	assert.Len(t, p.Messages, 2)
	assert.Equal(t, 2, p.PartitionsClaimed)
	// Acks need only partitionId + transactionId: partition ids are global.
	for _, a := range h.ackAll(p, "") {
		assert.True(t, a.Success)
	}

	h.pushN("billing-a", "", 1)
	h.pushN("billing-b", "", 1)
	st, p = h.pop("/api/v1/pop", vals("task", "refund", "partitions", "10"))
	require.Equal(t, http.StatusOK, st)
	require.Len(t, p.Messages, 1)

	// No long poll on discovery: an empty answer comes at once. The margin
	// is what the test tells apart: a long poll would take its 60 s.
	start := time.Now()
	st, _ = h.pop("/api/v1/pop", vals("task", "refund", "wait", "true", "timeout", "60000"))
	assert.Equal(t, http.StatusNoContent, st)
	assert.Less(t, time.Since(start), 30*time.Second)
}

func TestQueueModeSharesOneCursorGroupsHaveTheirOwn(t *testing.T) {
	h := newHC(t, Start(t))
	h.pushN("q", "p", 4)
	// Queue mode: two consumers split the work.
	a := h.popQ("q", vals("batch", "2"))
	h.ackAll(a, "")
	b := h.popQ("q", vals("batch", "2"))
	assert.Equal(t, []int{0, 1}, ns(t, a.Messages))
	assert.Equal(t, []int{2, 3}, ns(t, b.Messages))
	h.ackAll(b, "")
	h.popEmpty("q", nil)

	// Each named group reads everything on its own cursor.
	for _, g := range []string{"g1", "g2"} {
		p := h.popQ("q", vals("consumerGroup", g, "subscriptionMode", "all", "batch", "10"))
		assert.Equal(t, []int{0, 1, 2, 3}, ns(t, p.Messages), g)
		assert.Equal(t, g, p.ConsumerGroup)
		assert.Equal(t, g, p.Messages[0].ConsumerGroup)
		h.popEmpty("q", vals("consumerGroup", g)) // leased for this group
		h.ackAll(p, g)
		h.popEmpty("q", vals("consumerGroup", g))
	}
}

func TestLeaseIsExclusiveWithinAGroupUntilAck(t *testing.T) {
	h := newHC(t, Start(t))
	h.pushN("q", "p", 3)
	g := vals("consumerGroup", "g", "subscriptionMode", "all", "batch", "1")
	p := h.popQ("q", g)
	h.popEmpty("q", g)
	// Another group is not affected.
	h.popQ("q", vals("consumerGroup", "other", "subscriptionMode", "all"))
	h.ackMsg(p.Messages[0], "completed", "g")
	p = h.popQ("q", g)
	assert.Equal(t, []int{1}, ns(t, p.Messages))
}

func TestSubscriptionModes(t *testing.T) {
	clock := NewFakeClock(t0)
	h := newHC(t, Start(t, WithClock(clock)))
	h.pushN("q", "old", 3) // at t0
	clock.Advance(time.Minute)
	h.pushN("q", "old", 2) // at t0+1m: n=0,1 again, offsets 3,4

	// all: everything kept.
	p := h.popQ("q", vals("consumerGroup", "all", "subscriptionMode", "all", "batch", "100"))
	assert.Len(t, p.Messages, 5)

	// subscriptionFrom: from the first message at or after the time.
	p = h.popQ("q", vals("consumerGroup", "from", "subscriptionFrom", t0.Add(30*time.Second).Format(time.RFC3339), "batch", "100"))
	assert.Equal(t, []int64{3, 4}, []int64{p.Messages[0].Offset, p.Messages[1].Offset})

	// new (the default): skips the backlog that exists at its first pop...
	h.popEmpty("q", vals("consumerGroup", "fresh"))
	clock.Advance(time.Minute)
	h.pushN("q", "old", 1)
	// ...but still reads a partition created after it registered, from its start.
	h.pushN("q", "born-later", 2)
	p = h.popQ("q", vals("consumerGroup", "fresh", "batch", "100", "partitions", "10"))
	assert.Len(t, p.Messages, 3)
	byPart := map[string]int{}
	for _, m := range p.Messages {
		byPart[m.Partition]++
	}
	assert.Equal(t, map[string]int{"old": 1, "born-later": 2}, byPart)

	// The start is fixed at the first pop: asking for "all" later changes nothing.
	h.ackAll(p, "fresh")
	h.popEmpty("q", vals("consumerGroup", "fresh", "subscriptionMode", "all"))
}

func TestLongPollWakesOnPushAndTimesOutWith204(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)

	start := time.Now()
	st, _ := h.pop("/api/v1/pop/queue/q", vals("wait", "true", "timeout", "150"))
	assert.Equal(t, http.StatusNoContent, st)
	assert.GreaterOrEqual(t, time.Since(start), 140*time.Millisecond)

	var wg sync.WaitGroup
	wg.Add(1)
	var got *tPop
	var elapsed time.Duration
	go func() {
		defer wg.Done()
		begin := time.Now()
		_, got = h.pop("/api/v1/pop/queue/q", vals("wait", "true", "timeout", "60000"))
		elapsed = time.Since(begin)
	}()
	for s.Requests(RoutePop) < 2 { // the long poll has reached the broker
		time.Sleep(time.Millisecond)
	}
	h.pushN("q", "p", 1)
	wg.Wait()
	require.NotNil(t, got)
	assert.Len(t, got.Messages, 1)
	// The margin is what the test tells apart: the timeout's 60 s.
	assert.Less(t, elapsed, 30*time.Second, "woken by the push, not by the timeout")
}

func TestLongPollWakesOnAckRelease(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	h.pushN("q", "p", 2)
	first := h.popQ("q", vals("batch", "1"))
	done := make(chan *tPop, 1)
	go func() {
		_, p := h.pop("/api/v1/pop/queue/q", vals("wait", "true", "timeout", "60000"))
		done <- p
	}()
	for s.Requests(RoutePop) < 2 { // the long poll has reached the broker
		time.Sleep(time.Millisecond)
	}
	h.ackMsg(first.Messages[0], "completed", "")
	// The margin is what the test tells apart: the timeout's 60 s.
	select {
	case p := <-done:
		require.NotNil(t, p)
		assert.Equal(t, []int{1}, ns(t, p.Messages))
	case <-time.After(30 * time.Second):
		t.Fatal("the parked pop was not woken by the ack")
	}
}

func TestPopTimeoutIsCappedAt60s(t *testing.T) {
	p, err := parsePopParams(vals("timeout", "120000"))
	require.NoError(t, err)
	assert.Equal(t, 60*time.Second, p.timeout)
	p, err = parsePopParams(nil)
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, p.timeout)
	p, err = parsePopParams(vals("timeout", "0"))
	require.NoError(t, err)
	assert.Equal(t, time.Millisecond, p.timeout)
}

func TestAutopilotChoosesWhatTheRequestLeftOut(t *testing.T) {
	h := newHC(t, Start(t))
	for _, part := range []string{"a", "b", "c"} {
		h.pushN("q", part, 150)
	}
	// Both left out: the broker chooses both and echoes them.
	p := h.popQ("q", vals("autopilot", "true"))
	require.NotNil(t, p.Autopilot)
	ap := *p.Autopilot
	assert.Equal(t, 3, ap["partitions"], "partitions from the ready ones")
	assert.GreaterOrEqual(t, ap["batch"], 100)
	assert.LessOrEqual(t, ap["batch"], 1000)
	assert.LessOrEqual(t, len(p.Messages), ap["batch"])
	assert.Equal(t, 1, p.PartitionsClaimed, "150 messages in one partition fill a cold batch of 100")
	h.ackAll(p, "")

	// A dimension the request set is never changed.
	p = h.popQ("q", vals("autopilot", "true", "batch", "7"))
	require.NotNil(t, p.Autopilot)
	assert.Equal(t, 7, (*p.Autopilot)["batch"])
	assert.Len(t, p.Messages, 7)
	h.ackAll(p, "")
	p = h.popQ("q", vals("autopilot", "true", "partitions", "1"))
	assert.Equal(t, 1, (*p.Autopilot)["partitions"])
	h.ackAll(p, "")

	// Both set: no autopilot at all.
	p = h.popQ("q", vals("autopilot", "true", "partitions", "2", "batch", "5"))
	assert.Nil(t, p.Autopilot)
	h.ackAll(p, "")
	// The pinned route ignores it.
	_, p = h.pop("/api/v1/pop/queue/q/partition/c", vals("autopilot", "true"))
	assert.Nil(t, p.Autopilot)
}

// TestUnansweredClaimIsGivenBack drives runPop directly with a request whose
// client is gone: the claim must not strand the messages under a lease.
func TestUnansweredClaimIsGivenBack(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	h.pushN("q", "p", 2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p, err := parsePopParams(vals("batch", "2"))
	require.NoError(t, err)
	pr := p.base(s.b.now())
	pr.queue, pr.maxParts = "q", 1
	w := newRecorder()
	s.runPop(w, ctx, pr)
	assert.Equal(t, 0, s.LeasedCount("q", ""))
	got := h.popQ("q", vals("batch", "2"))
	assert.Len(t, got.Messages, 2)
	assert.Equal(t, 1, got.Messages[0].DeliveryAttempt, "a claim nobody received is no delivery")
}

func TestNewSubscriptionUsesPushOrderNotTimestamps(t *testing.T) {
	clock := NewFakeClock(t0) // never moves
	h := newHC(t, Start(t, WithClock(clock)))
	h.pushN("q", "p", 2)
	h.popEmpty("q", vals("consumerGroup", "g"))
	h.pushN("q", "p", 1) // same instant, but after the registration
	p := h.popQ("q", vals("consumerGroup", "g", "batch", "10"))
	assert.EqualValues(t, 2, p.Messages[0].Offset)
	h.ackAll(p, "g")

	// Deleting the cursors but keeping the registration re-seeds by the
	// stored subscription: still only what came after the first pop.
	h.doJSON("DELETE", "/api/v1/consumer-groups/g?deleteMetadata=false", nil, http.StatusOK, nil)
	p = h.popQ("q", vals("consumerGroup", "g", "batch", "10"))
	assert.Len(t, p.Messages, 1)
	assert.EqualValues(t, 2, p.Messages[0].Offset)
}

// A plain pinned pop does not register its consumer group (2.x
// rsm/consume/pop.rs pop_pinned; tests_pop.rs
// a_plain_pinned_pop_does_not_register_the_group): the partition it reads is
// started where this pop's subscription says, and the group registers, with
// its own subscription, at its first wildcard pop. A partition a pinned pop
// started without delivering anything keeps no cursor row: the group views
// do not list it, and the registration starts it by the group's policy
// (rsm/consume/load.rs register). A conflating pinned pop of an
// unregistered group does register it.
func TestPinnedPopDoesNotRegisterTheGroup(t *testing.T) {
	h := newHC(t, Start(t))
	pinned := func(part string, q url.Values) (int, *tPop) {
		return h.pop("/api/v1/pop/queue/q/partition/"+part, q)
	}
	h.pushN("q", "a", 1)
	st, _ := pinned("a", vals("consumerGroup", "g", "subscriptionMode", "new"))
	assert.Equal(t, http.StatusNoContent, st, "new: a's backlog is skipped")

	// b is created after that pop; a pinned pop in mode new still starts b
	// at its tail, since no registration fixed an earlier start.
	h.pushN("q", "b", 1)
	st, _ = pinned("b", vals("consumerGroup", "g", "subscriptionMode", "new"))
	assert.Equal(t, http.StatusNoContent, st)
	h.doJSON("GET", "/api/v1/consumer-groups/g", nil, http.StatusNotFound, nil)

	// The first wildcard pop registers the group with its own subscription,
	// which starts a and b anew: nothing was delivered there.
	h.pushN("q", "c", 1)
	p := h.popQ("q", vals("consumerGroup", "g", "subscriptionMode", "all", "partitions", "10", "batch", "10"))
	var got []string
	for _, m := range p.Messages {
		got = append(got, m.Partition)
	}
	assert.ElementsMatch(t, []string{"a", "b", "c"}, got)
	var rows []struct {
		Name             string `json:"name"`
		QueueName        string `json:"queueName"`
		SubscriptionMode string `json:"subscriptionMode"`
	}
	h.doJSON("GET", "/api/v1/consumer-groups", nil, http.StatusOK, &rows)
	mode := ""
	for _, r := range rows {
		if r.Name == "g" && r.QueueName == "q" {
			mode = r.SubscriptionMode
		}
	}
	assert.Equal(t, "all", mode)

	// A partition a pinned pop delivered from keeps its cursor: the group
	// views list it (the group still unregistered), and a registration
	// leaves it where it is.
	h.pushN("q", "e", 2)
	st, p = pinned("e", vals("consumerGroup", "ge", "subscriptionMode", "all", "batch", "1", "autoAck", "true"))
	require.Equal(t, http.StatusOK, st)
	assert.Equal(t, []int{0}, ns(t, p.Messages))
	var detail map[string]struct {
		Partitions []struct {
			Partition string `json:"partition"`
		} `json:"partitions"`
	}
	h.doJSON("GET", "/api/v1/consumer-groups/ge", nil, http.StatusOK, &detail)
	require.Len(t, detail["q"].Partitions, 1)
	assert.Equal(t, "e", detail["q"].Partitions[0].Partition)
	p = h.popQ("q", vals("consumerGroup", "ge", "subscriptionMode", "new", "partitions", "10", "batch", "10"))
	assert.Equal(t, []int{1}, ns(t, p.Messages), "e's cursor stays; the rest starts new")

	// A conflating pinned pop registers an unregistered group.
	h.pushN("q", "d", 2)
	st, p = pinned("d", vals("consumerGroup", "cg", "conflation", "true", "subscriptionMode", "all"))
	require.Equal(t, http.StatusOK, st)
	require.NotNil(t, p.Conflation)
	assert.Equal(t, []int{1}, ns(t, p.Messages))
	// Its registration writes a cursor row on every partition of the
	// queue (rsm/consume/pop.rs bulk_seed): all of them are in its view.
	var qv struct {
		Partitions []any `json:"partitions"`
	}
	h.doJSON("GET", "/api/v1/resources/queues/q", nil, http.StatusOK, &qv)
	h.doJSON("GET", "/api/v1/consumer-groups/cg", nil, http.StatusOK, &detail)
	assert.Len(t, detail["q"].Partitions, len(qv.Partitions))
	_, p = h.pop("/api/v1/pop/queue/q", vals("consumerGroup", "cg", "partitions", "10"))
	require.NotNil(t, p)
	require.NotNil(t, p.Conflation, "the stored policy of the registration")

	// So does one whose partition a plain pinned pop only started (no row
	// there: rsm/consume/pop.rs pop_pinned looks for one).
	st, _ = pinned("d", vals("consumerGroup", "cg2", "subscriptionMode", "new"))
	require.Equal(t, http.StatusNoContent, st)
	h.pushN("q", "d", 1)
	st, p = pinned("d", vals("consumerGroup", "cg2", "conflation", "true", "subscriptionMode", "all"))
	require.Equal(t, http.StatusOK, st)
	assert.Equal(t, []int{0}, ns(t, p.Messages), "the newest message of d")
	h.doJSON("GET", "/api/v1/consumer-groups", nil, http.StatusOK, &rows)
	mode = ""
	for _, r := range rows {
		if r.Name == "cg2" && r.QueueName == "q" {
			mode = r.SubscriptionMode
		}
	}
	assert.Equal(t, "all", mode, "registered by the conflating pop")
}

// The subscription knobs read as the 2.x broker reads them (handlers/data.rs,
// config.rs normalize_subscription_mode): no subscriptionMode is the default,
// new; one that spells new (any case, "new-only" and its kin) is new; any
// other, an empty one included, is all; subscriptionFrom=now is new. A
// group is listed once it has a cursor row: once something was delivered.
func TestSubscriptionModeSpellings(t *testing.T) {
	h := newHC(t, Start(t))
	h.pushN("q", "p", 1)
	modes := map[string]url.Values{
		"absent":   vals(),
		"empty":    vals("subscriptionMode", ""),
		"NEW":      vals("subscriptionMode", "NEW"),
		"new-only": vals("subscriptionMode", "new-only"),
		"bogus":    vals("subscriptionMode", "from_beginning"),
		"now":      vals("subscriptionFrom", "now", "subscriptionMode", "all"),
	}
	for group, q := range modes {
		q.Set("consumerGroup", group)
		h.pop("/api/v1/pop/queue/q", q)
	}
	h.pushN("q", "p", 1)
	for _, q := range modes {
		h.pop("/api/v1/pop/queue/q", q)
	}
	var rows []struct {
		Name             string `json:"name"`
		SubscriptionMode string `json:"subscriptionMode"`
	}
	h.doJSON("GET", "/api/v1/consumer-groups", nil, http.StatusOK, &rows)
	got := map[string]string{}
	for _, r := range rows {
		got[r.Name] = r.SubscriptionMode
	}
	assert.Equal(t, map[string]string{
		"absent": "new", "empty": "all", "NEW": "new", "new-only": "new", "bogus": "all", "now": "new",
	}, got)
}

// TestWindowBufferHoldsARecentlyWrittenPartition: a partition whose newest
// message is younger than the queue's windowBuffer is claimed by no pop,
// wildcard or pinned; once it has been quiet that long, the whole burst
// comes in one claim (upstream rsm/consume/pop.rs claim_one).
func TestWindowBufferHoldsARecentlyWrittenPartition(t *testing.T) {
	clock := NewFakeClock(t0)
	h := newHC(t, Start(t, WithClock(clock)))
	configure(h, "q", item{"windowBuffer": 5})
	h.pushN("q", "p", 1)
	h.popEmpty("q", nil)
	clock.Advance(4 * time.Second)
	h.pushN("q", "p", 1) // the burst goes on: the hold runs from this one
	clock.Advance(4 * time.Second)
	h.popEmpty("q", vals("batch", "10"))
	st, _ := h.pop("/api/v1/pop/queue/q/partition/p", nil)
	assert.Equal(t, http.StatusNoContent, st, "the pinned route is held too")
	clock.Advance(time.Second)
	p := h.popQ("q", vals("batch", "10"))
	assert.Equal(t, []int{0, 0}, ns(t, p.Messages), "the whole burst in one claim")
}

// TestPopCommitOnDelivery: commitOnDelivery=true is autoAck=true under its
// documented name (2.0.2+), on every pop route: no lease, the cursor moves
// past what is handed out, nothing comes back. With conflation it is
// refused, naming both (upstream handlers/data.rs, tests_unit
// pop_commit_on_delivery.rs).
func TestPopCommitOnDelivery(t *testing.T) {
	clock := NewFakeClock(t0)
	h := newHC(t, Start(t, WithClock(clock)))
	configure(h, "q", item{"leaseTime": 10, "namespace": "ns"})
	h.pushN("q", "p", 3)
	for _, path := range []string{"/api/v1/pop/queue/q", "/api/v1/pop/queue/q/partition/p", "/api/v1/pop"} {
		q := vals("batch", "1", "commitOnDelivery", "true")
		if path == "/api/v1/pop" {
			q.Set("namespace", "ns")
		}
		st, p := h.pop(path, q)
		require.Equal(t, http.StatusOK, st, path)
		require.Len(t, p.Messages, 1, path)
		assert.Equal(t, "", p.LeaseID, path)
		assert.Equal(t, "", p.Messages[0].LeaseID, path)
	}
	clock.Advance(time.Minute) // any lease would be over
	h.popEmpty("q", nil)

	st, _, raw := h.do("GET", "/api/v1/pop/queue/q?conflation=true&consumerGroup=g&commitOnDelivery=true", nil)
	assert.Equal(t, http.StatusBadRequest, st)
	assert.Contains(t, string(raw), "commitOnDelivery")
	assert.Contains(t, string(raw), "autoAck")
	st, _, _ = h.do("GET", "/api/v1/pop/queue/q?commitOnDelivery=yes", nil)
	assert.Equal(t, http.StatusBadRequest, st, "a typed boolean")
}
