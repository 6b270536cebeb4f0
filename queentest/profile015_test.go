package queentest

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of the 0.15.1 profile, over raw HTTP. Each pins a behaviour of the
// real 0.15.1 broker recorded in PROTOCOL.md §11, §13, §15, §16 and the
// captures, or read in its SQL.

// anyUUID matches a UUID of any version (0.15.1 names partitions with
// version 4 ones).
var anyUUID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// h15 is a raw client of a 0.15.1-profile broker.
type h15 struct {
	*hc
	clock *FakeClock
	srv   *Server
}

func start015(t *testing.T) *h15 {
	t.Helper()
	clock := NewFakeClock(t0)
	s := Start(t, Broker015(), WithClock(clock))
	require.Equal(t, Profile015, s.Profile())
	return &h15{hc: newHC(t, s), clock: clock, srv: s}
}

// call sends a request and decodes any JSON answer into a generic value.
func (h *h15) call(method, path string, body any) (int, any) {
	h.t.Helper()
	st, _, raw := h.do(method, path, body)
	var v any
	if len(raw) > 0 && json.Valid(raw) {
		require.NoError(h.t, json.Unmarshal(raw, &v))
	} else if len(raw) > 0 {
		v = string(raw)
	}
	return st, v
}

// obj requires an object answer with status 200.
func (h *h15) obj(method, path string, body any) map[string]any {
	h.t.Helper()
	st, v := h.call(method, path, body)
	require.Equalf(h.t, http.StatusOK, st, "%s %s: %v", method, path, v)
	m, ok := v.(map[string]any)
	require.Truef(h.t, ok, "%s %s answered %v, want an object", method, path, v)
	return m
}

// arr requires an array answer with status 200.
func (h *h15) arr(method, path string, body any) []map[string]any {
	h.t.Helper()
	st, v := h.call(method, path, body)
	require.Equalf(h.t, http.StatusOK, st, "%s %s: %v", method, path, v)
	raw, err := json.Marshal(v)
	require.NoError(h.t, err)
	var out []map[string]any
	require.NoErrorf(h.t, json.Unmarshal(raw, &out), "%s %s answered %v, want an array", method, path, v)
	return out
}

func (h *h15) push15(queue, partition string, payloads ...any) []map[string]any {
	h.t.Helper()
	items := make([]item, len(payloads))
	for i, p := range payloads {
		items[i] = item{"queue": queue, "partition": partition, "payload": p}
	}
	return h.arr("POST", "/api/v1/push", item{"items": items})
}

// pop15 pops the wildcard route of queue and decodes the answer.
func (h *h15) pop15(queue string, q url.Values) tPop {
	h.t.Helper()
	path := "/api/v1/pop/queue/" + queue
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	st, _, raw := h.do("GET", path, nil)
	require.Equalf(h.t, http.StatusOK, st, "pop %s", raw)
	var p tPop
	require.NoError(h.t, json.Unmarshal(raw, &p), string(raw))
	return p
}

// requireNoPartition requires the empty wildcard answer of 0.15.1.
func (h *h15) requireNoPartition(queue string, q url.Values) {
	h.t.Helper()
	path := "/api/v1/pop/queue/" + queue
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	st, _, raw := h.do("GET", path, nil)
	require.Equal(h.t, http.StatusOK, st)
	require.JSONEq(h.t, `{"error":"no_available_partition","messages":[],"success":false}`, string(raw))
}

func (h *h15) batchAck(group string, acks ...item) []map[string]any {
	h.t.Helper()
	body := item{"acknowledgments": acks}
	if group != "" {
		body["consumerGroup"] = group
	}
	out := h.arr("POST", "/api/v1/ack/batch", body)
	require.Len(h.t, out, len(acks))
	return out
}

func ackItem(m tMessage, status string) item {
	return item{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": status}
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestProfiles(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Profile
	}{{"", Profile2x}, {"2.x", Profile2x}, {"0.15.1", Profile015}, {"0.15", Profile015}} {
		p, err := ParseProfile(tc.in)
		require.NoError(t, err)
		assert.Equal(t, tc.want, p, tc.in)
	}
	_, err := ParseProfile("1.4")
	assert.Error(t, err)
	assert.Equal(t, Profile2x, Start(t).Profile(), "the default profile")
	assert.Equal(t, []Profile{Profile2x, Profile015}, Profiles())
}

// TestBroker015Statuses: 200 for everything that reaches the database, real
// 400s before it, 201 [] for an empty push, an HTML 404 for unknown routes
// (fetch and discovery pop included), the 0.15.1 /health.
func TestBroker015Statuses(t *testing.T) {
	h := start015(t)

	h.requireNoPartition("nothing", nil)
	st, _, raw := h.do("GET", "/api/v1/pop/queue/nothing/partition/p1", nil)
	require.Equal(t, http.StatusOK, st)
	assert.JSONEq(t, `{"error":"partition_not_found","messages":[],"success":false}`, string(raw))

	// A long poll that times out.
	st, _, raw = h.do("GET", "/api/v1/pop/queue/t3?wait=true&timeout=30", nil)
	require.Equal(t, http.StatusOK, st)
	assert.JSONEq(t, `{"consumerGroup":"__QUEUE_MODE__","leaseId":null,"messages":[],"partition":"","partitionId":null,"queue":"t3","success":true}`, string(raw))

	for _, tc := range []struct {
		path, body, want string
	}{
		{"/api/v1/push", `{"foo":1}`, "items array is required"},
		{"/api/v1/push", `{"items":[{"partition":"p1","payload":{}}]}`, "Queue must be a string"},
		{"/api/v1/push", `{"items":[{"queue":"t1","partition":5}]}`, "Partition must be a string"},
		{"/api/v1/push", `{"items":[{"queue":"t1","transactionId":5}]}`, "TransactionId must be a string"},
		{"/api/v1/push", `{"items":[{"queue":"t1","traceId":5}]}`, "TraceId must be a string"},
		{"/api/v1/push", ``, "Empty request body"},
		{"/api/v1/ack", `{"transactionId":"x"}`, "partitionId is required to ensure message uniqueness"},
		{"/api/v1/ack", `{"partitionId":"x"}`, "transactionId is required"},
		{"/api/v1/ack/batch", `{"acknowledgments":[{"transactionId":"a"}]}`, "Each acknowledgment must have a valid partitionId string to ensure message uniqueness"},
		{"/api/v1/ack/batch", `{}`, "acknowledgments array is required"},
		{"/api/v1/configure", `{"options":{}}`, "queue is required"},
		{"/api/v1/transaction", `{"operations":[]}`, "operations array cannot be empty"},
		{"/api/v1/transaction", `{}`, "operations array required"},
		{"/api/v1/consumer-groups/G/queues/t1/seek", `{}`, "Must specify either 'toEnd': true or 'timestamp'"},
	} {
		st, _, raw := h.do("POST", tc.path, tc.body)
		assert.Equalf(t, http.StatusBadRequest, st, "%s %s", tc.path, tc.body)
		assert.JSONEqf(t, `{"error":`+strings.ReplaceAll(jsonQuote(tc.want), `\u0027`, "'")+`}`, string(raw), "%s %s", tc.path, tc.body)
	}
	st, _, raw = h.do("POST", "/api/v1/ack", `{not json`)
	assert.Equal(t, http.StatusBadRequest, st)
	assert.Contains(t, string(raw), `"Invalid JSON: `)

	st, _, raw = h.do("POST", "/api/v1/push", `{"items":[]}`)
	assert.Equal(t, http.StatusCreated, st)
	assert.JSONEq(t, `[]`, string(raw))

	for _, r := range []struct{ method, path string }{
		{"GET", "/api/v1/nope"}, {"POST", "/api/v1/fetch"}, {"GET", "/api/v1/pop?namespace=ns"},
		{"GET", "/api/v1/resources/queues/t1/depth"}, {"DELETE", "/api/v1/dlq?queue=t1"},
	} {
		st, hdr, raw := h.do(r.method, r.path, `{"entries":[]}`)
		assert.Equalf(t, http.StatusNotFound, st, "%s %s", r.method, r.path)
		assert.Emptyf(t, hdr.Values("Content-Type"), "%s %s: the real broker sends no Content-Type on its 404 page", r.method, r.path)
		assert.Containsf(t, string(raw), "<h1>File Not Found</h1>", "%s %s", r.method, r.path)
	}

	health := h.obj("GET", "/health", nil)
	assert.Equal(t, "1.0.0", health["version"])
	assert.Equal(t, "connected", health["database"])
	assert.Equal(t, "healthy", health["status"])
	assert.NotContains(t, health, "engine")

	// A database error is a 200 body.
	st, _, raw = h.do("POST", "/api/v1/ack", `{"transactionId":"x","partitionId":"not-a-uuid"}`)
	assert.Equal(t, http.StatusOK, st)
	var dbErr map[string]any
	require.NoError(t, json.Unmarshal(raw, &dbErr))
	assert.Equal(t, false, dbErr["success"])
	assert.Contains(t, dbErr["error"], `invalid input syntax for type uuid: "not-a-uuid"`)
}

func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestBroker015PushAndPopShapes: push items with partition_id and trace_id
// and no offset, duplicates without them; pop messages without
// deliveryAttempt or offset, a UUID partitionId; default batch 1; autopilot,
// conflation and leaseSeconds ignored, partitions honoured.
func TestBroker015PushAndPopShapes(t *testing.T) {
	h := start015(t)
	res := h.arr("POST", "/api/v1/push", item{"items": []item{
		{"queue": "t1", "partition": "p1", "payload": item{"n": 0}, "traceId": "11111111-2222-3333-4444-555555555555"},
		{"queue": "t1", "partition": "p1", "payload": item{"n": 1}, "transactionId": "tx-1"},
		{"queue": "t1", "partition": "p1", "payload": item{"n": 9}, "transactionId": "tx-1"},
	}})
	require.Len(t, res, 3)
	assert.Equal(t, []string{"index", "message_id", "partition_id", "queueName", "status", "trace_id", "transaction_id"}, keys(res[0]))
	assert.Equal(t, "queued", res[0]["status"])
	assert.Equal(t, "11111111-2222-3333-4444-555555555555", res[0]["trace_id"])
	assert.Nil(t, res[1]["trace_id"])
	assert.Regexp(t, anyUUID, res[0]["partition_id"])
	assert.Equal(t, []string{"index", "message_id", "queueName", "status", "transaction_id"}, keys(res[2]))
	assert.Equal(t, "duplicate", res[2]["status"])
	assert.Equal(t, res[1]["message_id"], res[2]["message_id"])
	h.push15("t1", "p1", item{"n": 2}, item{"n": 3})
	h.push15("t1", "p2", item{"n": 10})

	// No batch: one message, whatever autopilot says; no echo.
	st, _, raw := h.do("GET", "/api/v1/pop/queue/t1?autopilot=true&conflation=true&consumerGroup=g&subscriptionMode=all", nil)
	require.Equal(t, http.StatusOK, st)
	var body map[string]any
	require.NoError(t, json.Unmarshal(raw, &body))
	assert.Equal(t, []string{"consumerGroup", "leaseId", "messages", "partition", "partitionId", "partitionsClaimed", "queue", "success"}, keys(body))
	msgs := body["messages"].([]any)
	require.Len(t, msgs, 1)
	m := msgs[0].(map[string]any)
	assert.Equal(t, []string{"consumerGroup", "createdAt", "data", "id", "leaseId", "partition", "partitionId", "producerSub", "traceId", "transactionId"}, keys(m))
	assert.Regexp(t, anyUUID, m["partitionId"])
	assert.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`, m["createdAt"])
	assert.Equal(t, "11111111-2222-3333-4444-555555555555", m["traceId"])

	// partitions is honoured on the wildcard route, batch is the budget.
	p := h.pop15("t1", vals("batch", "10", "partitions", "2"))
	assert.Equal(t, 2, p.PartitionsClaimed)
	assert.ElementsMatch(t, []int{0, 1, 2, 3, 10}, ns(t, p.Messages))

	// leaseSeconds is ignored: the queue's lease (300 s by default) holds.
	h.push15("t2", "p", item{"n": 0}, item{"n": 1})
	p = h.pop15("t2", vals("batch", "1", "leaseSeconds", "1"))
	require.Len(t, p.Messages, 1)
	h.clock.Advance(5 * time.Second)
	st, _, raw = h.do("GET", "/api/v1/pop/queue/t2/partition/p?batch=5", nil)
	require.Equal(t, http.StatusOK, st)
	assert.JSONEq(t, `{"error":"lease_held","messages":[],"success":false}`, string(raw))
	h.clock.Advance(300 * time.Second)
	p = h.pop15("t2", vals("batch", "5"))
	assert.Equal(t, []int{0, 1}, ns(t, p.Messages), "the expired lease gives the batch back")

	// commit on delivery
	h.push15("t3", "p", item{"n": 0})
	p = h.pop15("t3", vals("autoAck", "true"))
	assert.Equal(t, "", p.LeaseID)
	require.Len(t, p.Messages, 1)
	assert.Equal(t, "", p.Messages[0].LeaseID)
	h.requireNoPartition("t3", nil)
}

// TestBroker015TraceIDAndNames: a non-UUID traceId, or a name longer than
// the 255-character columns, makes the whole push "buffered" and stores
// nothing; shorter names, empty ones included, are accepted.
func TestBroker015TraceIDAndNames(t *testing.T) {
	h := start015(t)
	got := h.arr("POST", "/api/v1/push", item{"items": []item{
		{"queue": "t4", "partition": "pA", "payload": 1},
		{"queue": "t4", "partition": "pA", "payload": 2, "traceId": "not-a-uuid"},
	}})
	assert.Equal(t, []map[string]any{{"queue": "t4", "status": "buffered"}, {"queue": "t4", "status": "buffered"}}, got)
	h.requireNoPartition("t4", vals("batch", "10"))

	long := strings.Repeat("é", 256)
	for _, it := range []item{
		{"queue": long, "payload": 1},
		{"queue": "q", "partition": long, "payload": 1},
		{"queue": "q", "transactionId": long, "payload": 1},
	} {
		got := h.arr("POST", "/api/v1/push", item{"items": []item{it}})
		assert.Equal(t, "buffered", got[0]["status"])
	}
	ok255 := strings.Repeat("é", 255)
	for _, it := range []item{
		{"queue": ok255, "payload": 1},
		{"queue": "q", "partition": ok255, "payload": 1},
		{"queue": "", "payload": 1},
		{"queue": "q", "partition": "", "payload": 1},
		{"queue": "a b", "payload": 1},
	} {
		got := h.arr("POST", "/api/v1/push", item{"items": []item{it}})
		assert.Equalf(t, "queued", got[0]["status"], "%v", it)
	}
	// Path parameters are not unescaped: "a b" cannot be reached by its path.
	h.requireNoPartition(url.PathEscape("a b"), nil)
	// A consumer group longer than its column fails the pop.
	body := h.obj("GET", "/api/v1/pop/queue/q?consumerGroup="+strings.Repeat("g", 256), nil)
	assert.Equal(t, false, body["success"])
	assert.Contains(t, body["error"], "value too long for type character varying(255)")
}

// cursorJumpSetup pushes 1, 2, 3 to q/p and has group g read them with
// subscriptionMode=all (which writes no subscription row).
func cursorJumpSetup(t *testing.T, h *h15, q string) tPop {
	t.Helper()
	h.push15(q, "p", item{"n": 1}, item{"n": 2}, item{"n": 3})
	h.clock.Advance(time.Second)
	p := h.pop15(q, vals("consumerGroup", "g", "subscriptionMode", "all", "batch", "10"))
	require.Equal(t, []int{1, 2, 3}, ns(t, p.Messages))
	return p
}

// requireJump requires the §16 answer of a subscriptionMode=new pop on a
// NULL cursor: success, no messages, a lease id, one partition claimed;
// and then nothing for ever.
func requireJump(t *testing.T, h *h15, q string) {
	t.Helper()
	h.clock.Advance(time.Second)
	p := h.pop15(q, vals("consumerGroup", "g", "subscriptionMode", "new", "batch", "10"))
	assert.True(t, p.Success)
	assert.Empty(t, p.Messages)
	assert.NotEmpty(t, p.LeaseID)
	assert.Equal(t, 1, p.PartitionsClaimed)
	h.requireNoPartition(q, vals("consumerGroup", "g", "batch", "10"))
	h.clock.Advance(time.Hour)
	h.requireNoPartition(q, vals("consumerGroup", "g", "batch", "10"))
	h.requireNoPartition(q, vals("consumerGroup", "g", "subscriptionMode", "all", "batch", "10"))
	// The group's messages are gone for it, not for others.
	p = h.pop15(q, vals("consumerGroup", "other", "batch", "10"))
	assert.Equal(t, []int{1, 2, 3}, ns(t, p.Messages))
}

// TestBroker015CursorJumpAfterFailed: PROTOCOL.md §16: push 1,2,3; pop
// (mode=all) → 1,2,3; ack 1 failed; pop (mode=new) → [] and the cursor at 3.
func TestBroker015CursorJumpAfterFailed(t *testing.T) {
	h := start015(t)
	p := cursorJumpSetup(t, h, "j1")
	res := h.batchAck("g", ackItem(p.Messages[0], "failed"))
	assert.Equal(t, true, res[0]["leaseReleased"])
	assert.Equal(t, false, res[0]["dlq"])
	requireJump(t, h, "j1")
}

// TestBroker015CursorJumpAfterRetry: the same after a retry of the first
// message, and after a lease expiry before any completion.
func TestBroker015CursorJumpAfterRetry(t *testing.T) {
	h := start015(t)
	p := cursorJumpSetup(t, h, "j2")
	h.batchAck("g", ackItem(p.Messages[0], "retry"))
	requireJump(t, h, "j2")

	h2 := start015(t)
	cursorJumpSetup(t, h2, "j3")
	h2.clock.Advance(301 * time.Second) // the lease expires
	requireJump(t, h2, "j3")
}

// TestBroker015CursorJumpAfterSeekBack: §16: ack 1, 2, 3 completed, seek to
// a time before the first message (the cursor goes back to NULL), pop
// (mode=new) → [] and nothing again. Without the mode the same pop reads
// everything.
func TestBroker015CursorJumpAfterSeekBack(t *testing.T) {
	h := start015(t)
	p := cursorJumpSetup(t, h, "j4")
	res := h.batchAck("g", ackItem(p.Messages[0], "completed"), ackItem(p.Messages[1], "completed"), ackItem(p.Messages[2], "completed"))
	assert.Equal(t, []any{false, false, true}, []any{res[0]["leaseReleased"], res[1]["leaseReleased"], res[2]["leaseReleased"]})
	seek := h.obj("POST", "/api/v1/consumer-groups/g/queues/j4/seek", item{"timestamp": "2026-10-22T00:00:00Z"})
	assert.Equal(t, map[string]any{
		"success": true, "consumerGroup": "g", "queueName": "j4", "seekToEnd": false,
		"targetTimestamp": "2026-10-22T00:00:00.000Z", "partitionsUpdated": float64(1),
	}, seek)
	requireJump(t, h, "j4")

	h2 := start015(t)
	p = cursorJumpSetup(t, h2, "j5")
	h2.ackAll(&p, "g")
	h2.obj("POST", "/api/v1/consumer-groups/g/queues/j5/seek", item{"timestamp": "2026-10-22T00:00:00Z"})
	h2.clock.Advance(time.Second)
	p = h2.pop15("j5", vals("consumerGroup", "g", "batch", "10"))
	assert.Equal(t, []int{1, 2, 3}, ns(t, p.Messages), "without subscriptionMode the seek rereads")
}

// TestBroker015SubscriptionRows: a group registered with `new` skips the
// backlog of that moment only: later messages, and partitions created
// later, are read; its NULL cursors start at the registration, so a failed
// first message comes back. A subscriptionFrom timestamp starts there.
func TestBroker015SubscriptionRows(t *testing.T) {
	h := start015(t)
	h.push15("s", "p", item{"n": 0}, item{"n": 1})
	h.clock.Advance(time.Second)
	p := h.pop15("s", vals("consumerGroup", "g", "subscriptionMode", "new", "batch", "10"))
	assert.Empty(t, p.Messages, "the backlog is skipped")
	assert.Equal(t, 1, p.PartitionsClaimed)
	h.clock.Advance(time.Second)
	h.push15("s", "p", item{"n": 2})
	h.push15("s", "q", item{"n": 3})
	p = h.pop15("s", vals("consumerGroup", "g", "subscriptionMode", "new", "batch", "10", "partitions", "2"))
	assert.ElementsMatch(t, []int{2, 3}, ns(t, p.Messages))
	for _, m := range p.Messages {
		if m.Partition == "q" {
			h.batchAck("g", ackItem(m, "failed")) // q's cursor is still NULL
		} else {
			h.batchAck("g", ackItem(m, "completed"))
		}
	}
	p = h.pop15("s", vals("consumerGroup", "g", "subscriptionMode", "new", "batch", "10"))
	assert.Equal(t, []int{3}, ns(t, p.Messages), "the row dates the NULL cursor: no jump for a registered group")

	h.push15("f", "p", item{"n": 0})
	h.clock.Advance(time.Minute)
	h.push15("f", "p", item{"n": 1})
	from := t0.Add(30 * time.Second).Format(time.RFC3339)
	p = h.pop15("f", vals("consumerGroup", "g", "subscriptionFrom", from, "batch", "10"))
	assert.Equal(t, []int{1}, ns(t, p.Messages))
}

// TestBroker015DeadLetterKeepsLease: §16: [completed, completed, completed,
// failed] where the failed spends the last retry: dlq:true for it,
// leaseReleased:false for every item; the rest of the pop stays leased
// until the lease expires.
func TestBroker015DeadLetterKeepsLease(t *testing.T) {
	h := start015(t)
	configure(h.hc, "dl", item{"retryLimit": 0, "leaseTime": 30})
	h.push15("dl", "p", item{"n": 0}, item{"n": 1}, item{"n": 2}, item{"n": 3}, item{"n": 4}, item{"n": 5})
	p := h.pop15("dl", vals("consumerGroup", "g", "batch", "10"))
	require.Len(t, p.Messages, 6)
	res := h.batchAck("g", ackItem(p.Messages[0], "completed"), ackItem(p.Messages[1], "completed"),
		ackItem(p.Messages[2], "completed"), ackItem(p.Messages[3], "failed"))
	for i, r := range res {
		assert.Equal(t, true, r["success"], i)
		assert.Equal(t, false, r["leaseReleased"], i)
		assert.Equal(t, i == 3, r["dlq"], i)
	}
	h.requireNoPartition("dl", vals("consumerGroup", "g", "batch", "10"))
	h.clock.Advance(31 * time.Second)
	p = h.pop15("dl", vals("consumerGroup", "g", "batch", "10"))
	assert.Equal(t, []int{4, 5}, ns(t, p.Messages), "the rest comes back after the lease expired")
	assert.Equal(t, 1, h.srv.DLQCount("dl"))

	// A failed that does not dead-letter releases the lease.
	configure(h.hc, "nd", item{"leaseTime": 30})
	h.push15("nd", "p", item{"n": 0}, item{"n": 1})
	p = h.pop15("nd", vals("batch", "10"))
	res = h.batchAck("", ackItem(p.Messages[0], "completed"), ackItem(p.Messages[1], "failed"))
	assert.Equal(t, true, res[1]["leaseReleased"])
	assert.Equal(t, false, res[1]["dlq"])
	p = h.pop15("nd", vals("batch", "10"))
	assert.Equal(t, []int{1}, ns(t, p.Messages), "redelivered at once: 0.15.1 never applies retryDelay")
}

// TestBroker015DeadLetterThenRetry: §16: [failed(dlq), retry, retry]
// answers leaseReleased:true on the retry items and the next pop returns
// them; retry spends no budget.
func TestBroker015DeadLetterThenRetry(t *testing.T) {
	h := start015(t)
	configure(h.hc, "dr", item{"retryLimit": 0})
	h.push15("dr", "p", item{"n": 0}, item{"n": 1}, item{"n": 2})
	p := h.pop15("dr", vals("consumerGroup", "g", "batch", "10"))
	res := h.batchAck("g", ackItem(p.Messages[0], "failed"), ackItem(p.Messages[1], "retry"), ackItem(p.Messages[2], "retry"))
	assert.Equal(t, []any{true, false, false}, []any{res[0]["dlq"], res[1]["dlq"], res[2]["dlq"]})
	assert.Equal(t, []any{false, true, true}, []any{res[0]["leaseReleased"], res[1]["leaseReleased"], res[2]["leaseReleased"]})
	for i := range 3 {
		p = h.pop15("dr", vals("consumerGroup", "g", "batch", "10"))
		assert.Equal(t, []int{1, 2}, ns(t, p.Messages), "retry %d", i)
		h.batchAck("g", ackItem(p.Messages[0], "retry"))
	}
}

// TestBroker015AckRules: a single ack after a retry or failed released the
// lease is refused (§15); [completed, retry, retry] in one batch succeeds
// throughout; the retry budget is per partition consumer with default 3;
// `success` is accepted as completed; acking the last message of a batch
// consumes the whole batch; failed and dlq share a branch that always
// dead-letters.
func TestBroker015AckRules(t *testing.T) {
	h := start015(t)
	h.push15("a", "p", item{"n": 0}, item{"n": 1}, item{"n": 2})
	p := h.pop15("a", vals("batch", "10"))
	r := h.arr("POST", "/api/v1/ack", ackItem(p.Messages[0], "retry"))[0]
	assert.Equal(t, map[string]any{
		"index": float64(0), "transactionId": p.Messages[0].TransactionID, "success": true, "error": nil,
		"queueName": "a", "partitionName": "p", "leaseReleased": true, "dlq": false,
	}, r)
	r = h.arr("POST", "/api/v1/ack", ackItem(p.Messages[1], "retry"))[0]
	assert.Equal(t, false, r["success"])
	assert.Equal(t, "Invalid or expired lease", r["error"])

	p = h.pop15("a", vals("batch", "10"))
	res := h.batchAck("", ackItem(p.Messages[0], "success"), ackItem(p.Messages[1], "retry"), ackItem(p.Messages[2], "retry"))
	for i, r := range res {
		assert.Equal(t, true, r["success"], i)
	}
	p = h.pop15("a", vals("batch", "10"))
	assert.Equal(t, []int{1, 2}, ns(t, p.Messages))

	// Acking the last message consumes the batch; the lease stays until the
	// batch is counted or the lease expires.
	r = h.arr("POST", "/api/v1/ack", ackItem(p.Messages[1], "completed"))[0]
	assert.Equal(t, false, r["leaseReleased"])
	h.clock.Advance(301 * time.Second)
	h.requireNoPartition("a", vals("batch", "10"))

	// Retry budget: three failures, the fourth dead-letters (retry_count 3).
	h.push15("b", "p", item{"n": 0}, item{"n": 1})
	for i := range 3 {
		p = h.pop15("b", vals("batch", "1"))
		assert.Equal(t, []int{0}, ns(t, p.Messages))
		r = h.arr("POST", "/api/v1/ack", ackItem(p.Messages[0], "failed"))[0]
		assert.Equalf(t, false, r["dlq"], "failure %d", i)
		// a retry between failures spends nothing
		p = h.pop15("b", vals("batch", "1"))
		h.arr("POST", "/api/v1/ack", ackItem(p.Messages[0], "retry"))
	}
	p = h.pop15("b", vals("batch", "1"))
	r = h.arr("POST", "/api/v1/ack", ackItem(p.Messages[0], "failed"))[0]
	assert.Equal(t, true, r["dlq"])
	p = h.pop15("b", vals("batch", "1"))
	assert.Equal(t, []int{1}, ns(t, p.Messages))
	r = h.arr("POST", "/api/v1/ack", ackItem(p.Messages[0], "dlq"))[0]
	assert.Equal(t, true, r["dlq"], "dlq dead-letters at once")
	assert.Equal(t, 2, h.srv.DLQCount("b"))

	// Unknown message, unknown status.
	r = h.arr("POST", "/api/v1/ack", item{"transactionId": "nope", "partitionId": "00000000-0000-0000-0000-000000000000"})[0]
	assert.Equal(t, "Message not found", r["error"])
	assert.Nil(t, r["queueName"])
	h.push15("c", "p", item{"n": 0})
	p = h.pop15("c", nil)
	r = h.arr("POST", "/api/v1/ack", ackItem(p.Messages[0], "bogus"))[0]
	assert.Equal(t, false, r["success"])
	assert.Nil(t, r["error"])
}

// TestBroker015Seek: a per-partition seek ignores its body and goes to the
// end; a queue seek moves only the cursors the group has; an unknown group
// updates nothing.
func TestBroker015Seek(t *testing.T) {
	h := start015(t)
	h.push15("k", "p", item{"n": 0}, item{"n": 1})
	p := h.pop15("k", vals("consumerGroup", "g", "batch", "1"))
	h.batchAck("g", ackItem(p.Messages[0], "completed"))
	got := h.obj("POST", "/api/v1/consumer-groups/g/queues/k/partitions/p/seek", item{"timestamp": "2020-01-01T00:00:00Z"})
	assert.Equal(t, true, got["success"])
	assert.Equal(t, true, got["updated"])
	h.requireNoPartition("k", vals("consumerGroup", "g", "batch", "10"))
	got = h.obj("POST", "/api/v1/consumer-groups/g/queues/k/partitions/nope/seek", nil)
	assert.Equal(t, map[string]any{"success": false, "error": "Partition not found"}, got)

	got = h.obj("POST", "/api/v1/consumer-groups/NOPE/queues/k/seek", item{"toEnd": true})
	assert.Equal(t, float64(0), got["partitionsUpdated"])
	assert.Equal(t, nil, got["targetTimestamp"])
	got = h.obj("POST", "/api/v1/consumer-groups/g/queues/k/seek", item{"timestamp": "2020-01-01T00:00:00Z"})
	assert.Equal(t, float64(1), got["partitionsUpdated"])
	p = h.pop15("k", vals("consumerGroup", "g", "batch", "10"))
	assert.Equal(t, []int{0, 1}, ns(t, p.Messages))
	got = h.obj("POST", "/api/v1/consumer-groups/g/queues/k/seek", item{"toEnd": true})
	assert.Equal(t, float64(1), got["partitionsUpdated"])
	h.requireNoPartition("k", vals("consumerGroup", "g", "batch", "10"))
}

// TestBroker015Configure: replace semantics; no recognised option errors yet
// creates the queue (§13).
func TestBroker015Configure(t *testing.T) {
	h := start015(t)
	got := h.obj("POST", "/api/v1/configure", item{"queue": "c", "options": item{"retryLimit": 5, "leaseTime": 30}})
	assert.Equal(t, true, got["configured"])
	assert.Regexp(t, anyUUID, got["partitionId"])
	opts := got["options"].(map[string]any)
	assert.Equal(t, float64(5), opts["retryLimit"])
	got = h.obj("POST", "/api/v1/configure", item{"queue": "c", "options": item{"leaseTime": 10}})
	opts = got["options"].(map[string]any)
	assert.Equal(t, float64(3), opts["retryLimit"], "what is not named goes back to the default")
	assert.Equal(t, float64(10), opts["leaseTime"])

	for _, body := range []item{{"queue": "s1"}, {"queue": "s2", "options": item{}}} {
		got = h.obj("POST", "/api/v1/configure", body)
		assert.Equal(t, map[string]any{"error": "[json.exception.type_error.306] cannot use value() with null"}, got)
	}
	// ... and yet s1 exists, with its Default partition.
	st, _, raw := h.do("GET", "/api/v1/pop/queue/s1/partition/Default", nil)
	require.Equal(t, http.StatusOK, st)
	assert.NotContains(t, string(raw), "partition_not_found")
	got = h.obj("POST", "/api/v1/configure", item{"queue": "s3", "namespace": "ns"})
	assert.Equal(t, true, got["configured"])
	assert.Equal(t, float64(300), got["options"].(map[string]any)["leaseTime"])
}

// TestBroker015Transaction: execute_transaction_v2: failed acks go straight
// to the DLQ; the lease is checked only when the op has a leaseId; retry is
// not an ack status there; a failure rolls the pushes back.
func TestBroker015Transaction(t *testing.T) {
	h := start015(t)
	h.push15("x", "p", item{"n": 0}, item{"n": 1})
	p := h.pop15("x", vals("batch", "10"))
	got := h.obj("POST", "/api/v1/transaction", item{"operations": []item{
		{"type": "push", "items": []item{{"queue": "y", "payload": item{"n": 5}}}},
		{"type": "ack", "transactionId": p.Messages[0].TransactionID, "partitionId": p.Messages[0].PartitionID, "status": "failed"},
	}})
	assert.Equal(t, true, got["success"])
	results := got["results"].([]any)
	require.Len(t, results, 2)
	assert.Equal(t, true, results[1].(map[string]any)["dlq"])
	assert.Equal(t, 1, h.srv.DLQCount("x"))

	// A wrong lease, then a retry: both roll back, the push with them.
	for _, op := range []item{
		{"type": "ack", "transactionId": p.Messages[1].TransactionID, "partitionId": p.Messages[1].PartitionID, "leaseId": "00000000-0000-0000-0000-000000000000"},
		{"type": "ack", "transactionId": p.Messages[1].TransactionID, "partitionId": p.Messages[1].PartitionID, "status": "retry"},
	} {
		got = h.obj("POST", "/api/v1/transaction", item{"operations": []any{
			item{"type": "push", "items": []item{{"queue": "z", "payload": item{"n": 7}}}}, op,
		}})
		assert.Equal(t, false, got["success"])
		assert.Contains(t, got["error"], "ACK operation failed")
		assert.Len(t, got["results"], 2)
		h.requireNoPartition("z", nil)
	}
	st, _, raw := h.do("GET", "/api/v1/pop/queue/y", nil)
	require.Equal(t, http.StatusOK, st)
	assert.Contains(t, string(raw), `"n":5`)
}

// TestBroker015Renew: the renew answer is an array; an unknown lease is
// "Lease not found", an expired one "Lease already expired".
func TestBroker015Renew(t *testing.T) {
	h := start015(t)
	configure(h.hc, "r", item{"leaseTime": 30})
	h.push15("r", "p", item{"n": 0})
	p := h.pop15("r", nil)
	got := h.arr("POST", "/api/v1/lease/"+p.LeaseID+"/extend", item{"seconds": 60})
	require.Len(t, got, 1)
	assert.Equal(t, []string{"error", "expiresAt", "index", "leaseId", "success"}, keys(got[0]))
	assert.Equal(t, true, got[0]["success"])
	assert.Equal(t, t0.Add(60*time.Second).Format("2006-01-02T15:04:05.000Z"), got[0]["expiresAt"])
	h.clock.Advance(61 * time.Second)
	got = h.arr("POST", "/api/v1/lease/"+p.LeaseID+"/extend", item{"seconds": 60})
	assert.Equal(t, "Lease already expired", got[0]["error"])
	got = h.arr("POST", "/api/v1/lease/not-a-uuid/extend", item{"seconds": 60})
	assert.Equal(t, "Lease not found", got[0]["error"])
	assert.Nil(t, got[0]["expiresAt"])
	st, _, _ := h.do("POST", "/api/v1/lease/x/extend", "")
	assert.Equal(t, http.StatusBadRequest, st, "0.15.1 requires a body")
}

// TestBroker015LongPoll: a parked pop wakes on a push; a parked pop whose
// claim jumps the cursor (§16) keeps waiting and times out empty, so the
// skip is silent.
func TestBroker015LongPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := bubble015(t)
		done := make(chan tPop, 1)
		go func() {
			st, _, raw := h.do("GET", "/api/v1/pop/queue/lp?wait=true&timeout=5000&batch=5", nil)
			var p tPop
			if st == http.StatusOK {
				_ = json.Unmarshal(raw, &p)
			}
			done <- p
		}()
		synctest.Wait() // parked
		h.push15("lp", "p", item{"n": 7})
		synctest.Wait() // on the bubble's clock, no time has passed
		select {
		case p := <-done:
			assert.Equal(t, []int{7}, ns(t, p.Messages))
		default:
			t.Fatal("the parked pop did not wake on the push")
		}

		p := cursorJumpSetup(t, h, "lq")
		h.batchAck("g", ackItem(p.Messages[0], "failed"))
		h.clock.Advance(time.Second)
		st, _, raw := h.do("GET", "/api/v1/pop/queue/lq?wait=true&timeout=100&consumerGroup=g&subscriptionMode=new&batch=10", nil)
		require.Equal(t, http.StatusOK, st)
		assert.JSONEq(t, `{"consumerGroup":"g","leaseId":null,"messages":[],"partition":"","partitionId":null,"queue":"lq","success":true}`, string(raw))
		h.requireNoPartition("lq", vals("consumerGroup", "g", "batch", "10"))
	})
}

// TestBroker015DeleteGroupForgetsItsSubscription: after a group delete
// (metadata included), a NULL cursor no longer starts at the old
// subscription row: the group reads from the start again.
func TestBroker015DeleteGroupForgetsItsSubscription(t *testing.T) {
	h := start015(t)
	h.push15("dg", "p", item{"n": 0})
	h.clock.Advance(time.Second)
	p := h.pop15("dg", vals("consumerGroup", "g", "subscriptionMode", "new"))
	require.Empty(t, p.Messages)
	h.obj("DELETE", "/api/v1/consumer-groups/g", nil)
	p = h.pop15("dg", vals("consumerGroup", "g"))
	assert.Equal(t, []int{0}, ns(t, p.Messages))
}

// TestBroker015MultiPartition: partitions is honoured (pop_unified_batch_v4)
// with batch as the budget of the whole pop, so partitions=8 without a batch
// still takes one message of one partition (§16); one lease id covers the
// claimed partitions but is held and released per partition (§15).
func TestBroker015MultiPartition(t *testing.T) {
	h := start015(t)
	h.push15("mp", "a", item{"n": 0}, item{"n": 1})
	h.push15("mp", "b", item{"n": 10}, item{"n": 11})
	p := h.pop15("mp", vals("partitions", "8", "consumerGroup", "one", "subscriptionMode", "all"))
	assert.Equal(t, 1, p.PartitionsClaimed)
	assert.Len(t, p.Messages, 1)

	p = h.pop15("mp", vals("partitions", "2", "batch", "10"))
	require.Equal(t, 2, p.PartitionsClaimed)
	require.Len(t, p.Messages, 4)
	var a, b []tMessage
	for _, m := range p.Messages {
		assert.Equal(t, p.LeaseID, m.LeaseID, "one lease id")
		if m.Partition == "a" {
			a = append(a, m)
		} else {
			b = append(b, m)
		}
	}
	res := h.batchAck("", ackItem(a[0], "failed"))
	assert.Equal(t, true, res[0]["leaseReleased"])
	res = h.batchAck("", ackItem(b[0], "completed"), ackItem(b[1], "completed"))
	assert.Equal(t, []any{true, true}, []any{res[0]["success"], res[1]["success"]}, "b's lease is still held")
	assert.Equal(t, true, res[1]["leaseReleased"])
	p = h.pop15("mp", vals("partitions", "2", "batch", "10"))
	assert.Equal(t, []int{0, 1}, ns(t, p.Messages), "only a's messages come back")
}

// A parked 0.15.1 pop looks again on libqueen's schedule: 100 ms after
// each of its first three empty looks, then 100 ms × n × 2, at most 1 s.
func TestBroker015RecheckSchedule(t *testing.T) {
	var r recheck015
	var got []time.Duration
	for range 7 {
		got = append(got, r.next())
	}
	ms := time.Millisecond
	assert.Equal(t, []time.Duration{100 * ms, 100 * ms, 100 * ms, 800 * ms, 1000 * ms, 1000 * ms, 1000 * ms}, got)
	r.empty = 0 // a push to the queue starts it again
	assert.Equal(t, 100*ms, r.next())
}

// waitedPop015 is the answer of a waiting pop and how long it took.
type waitedPop015 struct {
	pop  tPop
	took time.Duration
	err  error
}

// waitingPop015 sends a waiting pop of queue in the background with h's
// client; its answer arrives on the channel.
func waitingPop015(h *hc, queue string) <-chan waitedPop015 {
	out := make(chan waitedPop015, 1)
	go func() {
		var r waitedPop015
		start := time.Now()
		resp, err := h.c.Get(h.base + "/api/v1/pop/queue/" + queue + "?wait=true&timeout=10000&batch=1")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&r.pop)
			resp.Body.Close()
		}
		r.took, r.err = time.Since(start), err
		out <- r
	}()
	return out
}

// bubble015 is a 0.15.1 broker for a test in a synctest bubble (see
// bubbleServer): its schedule of looks runs on the bubble's clock.
func bubble015(t *testing.T) *h15 {
	t.Helper()
	clock := NewFakeClock(t0)
	s, h := bubbleServer(t, Broker015(), WithClock(clock))
	return &h15{hc: h, clock: clock, srv: s}
}

// An ack that frees a partition wakes no parked pop: the pop parked while
// the partition was leased takes its message at its next look (100 ms
// later), not at once (the stall a consume loop sat out at the end of a
// run, issue 11). On the bubble's clock: exactly the first look.
func TestBroker015ParkedPopIgnoresAcks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := bubble015(t)
		h.push15("rq", "p", map[string]any{"n": 1}, map[string]any{"n": 2})
		first := h.pop15("rq", url.Values{"wait": {"false"}, "batch": {"1"}})
		require.Len(t, first.Messages, 1)
		res := waitingPop015(h.hc, "rq")
		synctest.Wait() // parked: the partition is leased
		time.Sleep(20 * time.Millisecond)
		h.batchAck("", ackItem(first.Messages[0], "completed"))
		r := <-res
		require.NoError(t, r.err)
		require.Len(t, r.pop.Messages, 1, "the second message, at the next look")
		assert.Equal(t, recheckFirst015, r.took, "the ack woke the parked pop, or it waited past its first look")
	})
}

// A push to its queue makes a parked pop look at once, however far its
// schedule has backed off. On the bubble's clock, exactly at the push.
func TestBroker015PushWakesParkedPop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := bubble015(t)
		h.push15("wq", "p", map[string]any{"n": 0})
		first := h.pop15("wq", url.Values{"wait": {"false"}, "batch": {"1"}})
		require.Len(t, first.Messages, 1)
		h.batchAck("", ackItem(first.Messages[0], "completed")) // the queue is empty
		res := waitingPop015(h.hc, "wq")
		// Looks at 100, 200, 300 and 1100 ms; the next would be at 2100 ms.
		time.Sleep(1200 * time.Millisecond)
		h.push15("other", "p", map[string]any{"n": 1}) // another queue: no wake-up
		synctest.Wait()
		select {
		case r := <-res:
			t.Fatalf("a push to another queue woke the pop: %+v", r)
		default:
		}
		h.push15("wq", "p", map[string]any{"n": 2})
		r := <-res
		require.NoError(t, r.err)
		require.Len(t, r.pop.Messages, 1)
		assert.Equal(t, 1200*time.Millisecond, r.took, "the push did not wake the pop at once (its next look was at 2.1 s)")
	})
}

// TestBroker015WindowBuffer: a queue's windowBuffer holds a partition from
// pops until its newest message is windowBuffer seconds old, as
// pop_unified_batch_v4 does and the real 0.15.1 broker answered (a queue
// with windowBuffer 2: the wildcard route no_available_partition, the
// pinned route the body below, then, 2 s after the last push, the whole
// burst). The pinned route answers the hold before it reads the group, the
// batch or a lease. Deleting the newest message does not end the hold (it
// runs from partition_lookup, which a delete leaves alone).
func TestBroker015WindowBuffer(t *testing.T) {
	h := start015(t)
	configure(h.hc, "wb", item{"windowBuffer": 2, "leaseTime": 30})
	pid := h.push15("wb", "p1", item{"n": 0})[0]["partition_id"].(string)
	h.push15("wb", "p2", item{"n": 10})
	held := func(group string) string {
		return `{"consumerGroup":"` + group + `","leaseId":"","messages":[],"partition":"p1","partitionId":"` + pid +
			`","queue":"wb","success":true,"windowBufferActive":true}`
	}
	pinned := func(query string) string {
		st, _, raw := h.do("GET", "/api/v1/pop/queue/wb/partition/p1?"+query, nil)
		require.Equal(t, http.StatusOK, st)
		return string(raw)
	}
	h.requireNoPartition("wb", vals("batch", "10", "partitions", "2"))
	assert.JSONEq(t, held(queueModeGroup), pinned("batch=10"))
	assert.JSONEq(t, held("g"), pinned("batch=10&consumerGroup=g"))
	assert.JSONEq(t, held(queueModeGroup), pinned("batch=-1"), "the batch is not read while held")

	h.clock.Advance(time.Second)
	h.push15("wb", "p1", item{"n": 1}) // the hold runs from this one now
	h.clock.Advance(time.Second)
	p := h.pop15("wb", vals("batch", "10", "partitions", "2"))
	assert.Equal(t, []int{10}, ns(t, p.Messages), "p2, quiet for 2 s, is free; p1 is not")
	assert.JSONEq(t, held(queueModeGroup), pinned("batch=10"))
	h.clock.Advance(time.Second)
	p = h.pop15("wb", vals("batch", "10"))
	assert.Equal(t, []int{0, 1}, ns(t, p.Messages), "the burst in one claim, exactly 2 s after its last message")

	// A push to the leased partition holds it again: the hold is answered
	// before the lease is looked at.
	h.push15("wb", "p1", item{"n": 2})
	assert.JSONEq(t, held(queueModeGroup), pinned("batch=10"))
	h.clock.Advance(2 * time.Second)
	assert.JSONEq(t, `{"error":"lease_held","messages":[],"success":false}`, pinned("batch=10"))
	h.batchAck("", ackItem(p.Messages[0], "completed"), ackItem(p.Messages[1], "completed"))

	last := h.push15("wb", "p1", item{"n": 3})[0]
	del := h.obj("DELETE", "/api/v1/messages/"+pid+"/"+last["transaction_id"].(string), nil)
	require.Equal(t, true, del["success"], del)
	assert.JSONEq(t, held(queueModeGroup), pinned("batch=10"), "the delete does not end the hold")
	h.requireNoPartition("wb", vals("batch", "10"))
	h.clock.Advance(2 * time.Second)
	p = h.pop15("wb", vals("batch", "10"))
	assert.Equal(t, []int{2}, ns(t, p.Messages))
}

// TestBroker015WindowBufferWaitingPops: a held partition is no answer for a
// waiting pop: the pinned one sends the long poll's timeout answer, not the
// hold's body; a wildcard one takes the messages at its first look after
// the hold ends (the real broker: a wildcard pop with wait=true parked 2 s
// after a push and answered the message as the window passed).
func TestBroker015WindowBufferWaitingPops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := bubble015(t)
		configure(h.hc, "ww", item{"windowBuffer": 2})
		h.push15("ww", "p", item{"n": 0})
		st, _, raw := h.do("GET", "/api/v1/pop/queue/ww/partition/p?wait=true&timeout=1000&batch=10", nil)
		require.Equal(t, http.StatusOK, st)
		assert.JSONEq(t, `{"consumerGroup":"__QUEUE_MODE__","leaseId":null,"messages":[],"partition":"p","partitionId":null,"queue":"ww","success":true}`, string(raw))

		res := waitingPop015(h.hc, "ww")
		time.Sleep(150 * time.Millisecond) // looks at 0 and 100 ms: held
		synctest.Wait()
		select {
		case r := <-res:
			t.Fatalf("a held partition answered a waiting pop: %+v", r)
		default:
		}
		h.clock.Advance(2 * time.Second)
		r := <-res
		require.NoError(t, r.err)
		assert.Equal(t, []int{0}, ns(t, r.pop.Messages))
		assert.Equal(t, 200*time.Millisecond, r.took, "taken at the next look")
	})
}

// TestBroker015GeneratedTransactionID: an item without a transactionId, or
// with an empty one, is stored under a random (version 4) transaction id of
// its own, not its message id (a UUIDv7): push_messages_v3 generates it with
// gen_random_uuid(), as the real broker's answers show.
func TestBroker015GeneratedTransactionID(t *testing.T) {
	h := start015(t)
	res := h.arr("POST", "/api/v1/push", item{"items": []item{
		{"queue": "gt", "partition": "p", "payload": item{"n": 0}},
		{"queue": "gt", "partition": "p", "payload": item{"n": 1}, "transactionId": ""},
	}})
	v4 := `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`
	for _, r := range res {
		assert.Equal(t, "queued", r["status"])
		assert.Regexp(t, v4, r["transaction_id"])
		assert.NotEqual(t, r["message_id"], r["transaction_id"])
	}
	assert.NotEqual(t, res[0]["transaction_id"], res[1]["transaction_id"])
	p := h.pop15("gt", vals("batch", "2"))
	require.Len(t, p.Messages, 2)
	for i, m := range p.Messages {
		assert.Equal(t, res[i]["transaction_id"], m.TransactionID)
		assert.Equal(t, res[i]["message_id"], m.ID)
	}
}
