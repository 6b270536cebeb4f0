package queentest

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// deadLetter015 pops n messages of queue for group (mode all) and
// dead-letters them one by one, a second apart.
func deadLetter015(h *h15, queue, group string, n int) []tMessage {
	h.t.Helper()
	var out []tMessage
	for len(out) < n {
		p := h.pop15(queue, vals("consumerGroup", group, "subscriptionMode", "all", "batch", "100"))
		require.NotEmpty(h.t, p.Messages, "dead-lettered %d of %d", len(out), n)
		for _, m := range p.Messages {
			a := h.batchAck(group, ackItem(m, "dlq"))
			require.Equal(h.t, true, a[0]["success"], a)
			h.clock.Advance(time.Second)
		}
		out = append(out, p.Messages...)
	}
	return out
}

func TestBroker015DLQListIsTheRealOne(t *testing.T) {
	h := start015(t)
	h.push15("dq", "p1", 1, 2)
	h.clock.Advance(time.Second)
	h.push15("dq", "p2", 3)
	h.push15("other", "p1", 4)
	msgs := deadLetter015(h, "dq", "g", 3)
	deadLetter015(h, "other", "g", 1)

	// One queue, no paging: the envelope has no total; entries carry the
	// message's id and both times to the millisecond, newest failure first.
	out := h.obj("GET", "/api/v1/dlq?queue=dq", nil)
	assert.Equal(t, []string{"messages", "pagination"}, keys(out))
	assert.Equal(t, map[string]any{"limit": float64(100), "offset": float64(0)}, out["pagination"])
	list := out["messages"].([]any)
	require.Len(t, list, 3)
	ms := `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`
	for i, e := range list {
		m := e.(map[string]any)
		assert.Equal(t, []string{"consumerGroup", "createdAt", "data", "errorMessage", "failedAt", "id", "partition", "partitionId",
			"producerSub", "queue", "retryCount", "transactionId"}, keys(m))
		want := msgs[len(msgs)-1-i]
		assert.Equal(t, want.ID, m["id"], "id is the message's id")
		assert.Equal(t, want.TransactionID, m["transactionId"])
		assert.Equal(t, want.PartitionID, m["partitionId"])
		assert.Regexp(t, ms, m["failedAt"])
		assert.Regexp(t, ms, m["createdAt"])
		assert.Nil(t, m["producerSub"])
	}
	first := list[0].(map[string]any)
	created := t0
	if first["partition"] == "p2" {
		created = t0.Add(time.Second)
	}
	assert.Equal(t, isoMillis015(created), first["createdAt"], "createdAt is the message's creation")
	assert.Equal(t, isoMillis015(t0.Add(3*time.Second)), first["failedAt"])

	// The limit does not cut the list; partition, from and to are not read.
	out = h.obj("GET", "/api/v1/dlq?queue=dq&limit=1&partition=p1&from=2030-01-01T00:00:00Z&to=2000-01-01T00:00:00Z", nil)
	assert.Len(t, out["messages"], 3)
	assert.Equal(t, map[string]any{"limit": float64(1), "offset": float64(0)}, out["pagination"])
	// Without a queue, every queue; the group filter is read.
	assert.Len(t, h.obj("GET", "/api/v1/dlq", nil)["messages"], 4)
	assert.Len(t, h.obj("GET", "/api/v1/dlq?consumerGroup=nope", nil)["messages"], 0)
	// A limit that std::stoi cannot read is the default.
	assert.Equal(t, float64(100), h.obj("GET", "/api/v1/dlq?queue=dq&limit=many", nil)["pagination"].(map[string]any)["limit"])

	// Any offset of 1 or more, and limit 0, leave no row.
	for _, q := range []string{"offset=1", "offset=2&limit=1", "limit=0", "offset=7abc"} {
		st, _, raw := h.do("GET", "/api/v1/dlq?queue=dq&"+q, nil)
		assert.Equal(t, 200, st, q)
		assert.JSONEq(t, `{"success":true,"value":null}`, string(raw), q)
	}
	// A negative one is the database's refusal, in a 200.
	assert.Equal(t, false, h.obj("GET", "/api/v1/dlq?queue=dq&offset=-1", nil)["success"])
}

func TestBroker015DLQReplayRoutesAre404HTML(t *testing.T) {
	h := start015(t)
	h.push15("rq", "p", 1)
	m := deadLetter015(h, "rq", "g", 1)[0]
	for _, path := range []string{
		"/api/v1/dlq/" + m.ID + "/replay",
		"/api/v1/messages/" + m.PartitionID + "/" + m.TransactionID + "/retry",
	} {
		st, hdr, raw := h.do("POST", path, item{})
		assert.Equal(t, 404, st, path)
		assert.Empty(t, hdr.Values("Content-Type"), "%s: the real broker's 404 page has no Content-Type", path)
		assert.True(t, strings.HasPrefix(string(raw), "<html>"), path)
	}
	assert.Equal(t, 1, h.srv.DLQCount("rq"))
}

func TestBroker015QueueViews(t *testing.T) {
	h := start015(t)
	configure(h.hc, "old", item{"leaseTime": 60})
	h.clock.Advance(time.Second)
	h.push15("new", "b", 1, 2)
	h.push15("new", "a", 3)
	p := h.pop15("new", vals("batch", "1")) // queue mode: one message leased
	require.Len(t, p.Messages, 1)

	list := h.obj("GET", "/api/v1/resources/queues", nil)
	assert.Equal(t, []string{"queues"}, keys(list))
	qs := list["queues"].([]any)
	require.Len(t, qs, 2)
	nq := qs[0].(map[string]any) // newest first
	assert.Equal(t, "new", nq["name"])
	assert.Equal(t, []string{"createdAt", "id", "messages", "name", "namespace", "partitions", "task"}, keys(nq))
	assert.Equal(t, float64(2), nq["partitions"])
	// pending excludes the message being processed
	assert.Equal(t, map[string]any{"total": float64(3), "pending": float64(2), "processing": float64(1)}, nq["messages"])
	assert.Equal(t, "old", qs[1].(map[string]any)["name"])

	d := h.obj("GET", "/api/v1/resources/queues/new", nil)
	assert.Equal(t, []string{"createdAt", "id", "name", "namespace", "partitions", "task", "totals"}, keys(d))
	parts := d["partitions"].([]any)
	require.Len(t, parts, 2)
	pa := parts[0].(map[string]any)
	assert.Equal(t, "a", pa["name"])
	assert.Regexp(t, anyUUID, pa["id"])
	assert.Equal(t, []string{"createdAt", "id", "name", "newestMessage", "oldestMessage", "stats"}, keys(pa))
	assert.Equal(t, []string{"completed", "deadLetter", "failed", "pending", "processing", "total"}, keys(pa["stats"].(map[string]any)))
	assert.Equal(t, float64(3), d["totals"].(map[string]any)["total"])
	assert.Equal(t, float64(0), d["totals"].(map[string]any)["failed"])

	st, _, raw := h.do("GET", "/api/v1/resources/queues/nope", nil)
	assert.Equal(t, 200, st)
	assert.JSONEq(t, `{"error":"Queue not found"}`, string(raw))
}

func TestBroker015GroupViews(t *testing.T) {
	h := start015(t)
	h.push15("gq", "p", 1, 2, 3)
	h.clock.Advance(10 * time.Minute)
	p := h.pop15("gq", vals("consumerGroup", "g", "subscriptionMode", "all", "batch", "1"))
	require.Len(t, p.Messages, 1)
	h.batchAck("g", ackItem(p.Messages[0], "completed"))

	rows := h.arr("GET", "/api/v1/consumer-groups", nil)
	require.Len(t, rows, 1)
	r := rows[0]
	assert.Equal(t, []string{"maxTimeLag", "members", "name", "partitionsWithLag", "queueName", "state",
		"subscriptionCreatedAt", "subscriptionMode", "subscriptionTimestamp", "topics", "totalLag"}, keys(r))
	assert.Equal(t, "g", r["name"])
	assert.Nil(t, r["totalLag"], "0.15.1 never computes totalLag")
	assert.Equal(t, float64(1), r["members"])
	assert.Equal(t, float64(1), r["partitionsWithLag"])
	assert.Equal(t, float64(600), r["maxTimeLag"], "the age of the newest unread message")
	assert.Equal(t, "Lagging", r["state"])
	assert.Nil(t, r["subscriptionMode"], "a group started with mode all has no subscription row")

	d := h.obj("GET", "/api/v1/consumer-groups/g", nil)
	assert.Equal(t, []string{"gq"}, keys(d))
	q := d["gq"].(map[string]any)
	assert.Equal(t, []string{"partitions"}, keys(q), "no conflation or kind")
	pp := q["partitions"].([]any)[0].(map[string]any)
	assert.Equal(t, "p", pp["partition"])
	assert.Equal(t, float64(2), pp["offsetLag"])
	assert.Equal(t, float64(600), pp["timeLagSeconds"])
	assert.Equal(t, false, pp["leaseActive"])
	assert.Equal(t, float64(1), pp["totalConsumed"])

	// A group none of whose pops claimed anything has no row: {}.
	// The procedure's {} goes out as an empty answer (as seen on a real
	// 0.15.1 broker): 200, no body.
	st, _, raw := h.do("GET", "/api/v1/pop/queue/nothing?consumerGroup=ghost", nil)
	require.Equal(t, 200, st, string(raw))
	for _, g := range []string{"ghost", url.PathEscape("typo")} {
		st, _, raw = h.do("GET", "/api/v1/consumer-groups/"+g, nil)
		assert.Equal(t, 200, st)
		assert.Empty(t, raw, g)
	}
	// Likewise an empty group list.
	st, _, raw = start015(t).do("GET", "/api/v1/consumer-groups", nil)
	assert.Equal(t, 200, st)
	assert.Empty(t, raw)
}

// TestBroker015DLQTiesInRowOrder: letters of one failure time (one batch
// ack dead-lettering a pop) come, among themselves, in the order of their
// messages' rows, as the real 0.15.1 broker listed them (its list orders by
// failed_at alone; its plan read the ties in the messages table's order): a
// push stores its rows by partition id, then transaction id (byte order),
// whatever the order of its items, and pushes one after another. Not the
// order of the items or of the ack, nor their reverse.
func TestBroker015DLQTiesInRowOrder(t *testing.T) {
	h := start015(t)
	var items []item
	for i, txn := range []string{"c", "a", "e", "b", "d"} {
		items = append(items, item{"queue": "dt", "partition": "p", "transactionId": txn, "payload": item{"n": i}})
	}
	items = append(items, item{"queue": "dt", "partition": "q", "transactionId": "x", "payload": item{"n": 10}})
	res := h.arr("POST", "/api/v1/push", item{"items": items})
	h.push15("dt", "p", item{"n": 5}) // a later push, whatever its transaction id
	h.clock.Advance(time.Second)

	p := h.pop15("dt", vals("batch", "100", "partitions", "2"))
	require.Len(t, p.Messages, 7)
	acks := make([]item, len(p.Messages))
	for i, m := range p.Messages {
		acks[i] = ackItem(m, "dlq")
	}
	for _, a := range h.batchAck("", acks...) {
		require.Equal(t, true, a["dlq"], a)
	}

	var got []int
	failed := map[any]bool{}
	for _, e := range h.obj("GET", "/api/v1/dlq?queue=dt", nil)["messages"].([]any) {
		m := e.(map[string]any)
		got = append(got, int(m["data"].(map[string]any)["n"].(float64)))
		failed[m["failedAt"]] = true
	}
	require.Len(t, failed, 1, "one failure time")
	want := []int{1, 3, 0, 4, 2, 10, 5} // p's by transaction id, then q's
	if res[5]["partition_id"].(string) < res[0]["partition_id"].(string) {
		want = []int{10, 1, 3, 0, 4, 2, 5}
	}
	assert.Equal(t, want, got)
}
