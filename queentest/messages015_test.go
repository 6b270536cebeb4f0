package queentest

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func messagePath(pid, txn string) string { return "/api/v1/messages/" + pid + "/" + txn }

// TestBroker015MessageViewFields: get_message_v1's answer for a pushed,
// untouched message, field by field, as the real 0.15.1 broker gave it.
func TestBroker015MessageViewFields(t *testing.T) {
	h := start015(t)
	configure(h.hc, "mv", item{"retryLimit": 4, "retryDelay": 250, "leaseTime": 45, "priority": 2})
	pushed := h.push15("mv", "Default", item{"hello": "world"})
	pid, txn := pushed[0]["partition_id"].(string), pushed[0]["transaction_id"].(string)

	v := h.obj("GET", messagePath(pid, txn), nil)
	assert.Equal(t, []string{"consumerGroups", "createdAt", "errorMessage", "id", "isEncrypted", "leaseExpiresAt", "mode",
		"namespace", "partition", "partitionId", "payload", "producerSub", "queue", "queueConfig", "queuePath",
		"retryCount", "status", "task", "traceId", "transactionId"}, keys(v))
	assert.Equal(t, pushed[0]["message_id"], v["id"])
	assert.Equal(t, txn, v["transactionId"])
	assert.Equal(t, pid, v["partitionId"])
	assert.Equal(t, "mv", v["queue"])
	assert.Equal(t, "Default", v["partition"])
	assert.Equal(t, "mv/Default", v["queuePath"])
	assert.Equal(t, "", v["namespace"])
	assert.Equal(t, "", v["task"])
	assert.Equal(t, map[string]any{"hello": "world"}, v["payload"])
	assert.Equal(t, false, v["isEncrypted"])
	assert.Nil(t, v["traceId"])
	assert.Nil(t, v["producerSub"])
	assert.Nil(t, v["errorMessage"])
	assert.Nil(t, v["retryCount"])
	assert.Nil(t, v["leaseExpiresAt"])
	assert.Equal(t, t0.Format("2006-01-02T15:04:05.000Z"), v["createdAt"], "milliseconds, Z")
	assert.Equal(t, "pending", v["status"])
	assert.Equal(t, map[string]any{"leaseTime": 45.0, "retryLimit": 4.0, "retryDelay": 250.0, "ttl": 3600.0, "priority": 2.0},
		v["queueConfig"], "leaseTime in seconds, retryDelay in milliseconds")
	assert.Equal(t, map[string]any{"busGroupsCount": 0.0, "consumedByGroups": 0.0, "hasQueueMode": false, "type": "none"}, v["mode"])
	assert.Equal(t, []any{}, v["consumerGroups"])

	// The partition id is read as PostgreSQL reads a uuid: any case.
	up := h.obj("GET", messagePath(strings.ToUpper(pid), txn), nil)
	assert.Equal(t, txn, up["transactionId"])
	assert.Equal(t, pid, up["partitionId"], "answered in the stored form")
	bare := h.obj("GET", messagePath(strings.ReplaceAll(pid, "-", ""), txn), nil)
	assert.Equal(t, pid, bare["partitionId"], "hyphens are optional")

	// A trace id shows.
	traced := h.arr("POST", "/api/v1/push", item{"items": []item{{"queue": "mv", "partition": "Default", "payload": 1,
		"traceId": "0b2f4c1e-7d7a-4b53-9c39-1f8a2a8e5c11"}}})
	tv := h.obj("GET", messagePath(pid, traced[0]["transaction_id"].(string)), nil)
	assert.Equal(t, "0b2f4c1e-7d7a-4b53-9c39-1f8a2a8e5c11", tv["traceId"])
	assert.Equal(t, 1.0, tv["payload"])
}

// TestBroker015MessageViewUnknown: an unknown message or partition is HTTP
// 200 {"error":"Message not found"}; a partition id that is no uuid is
// PostgreSQL's error; the 2.x profile has no such route.
func TestBroker015MessageViewUnknown(t *testing.T) {
	h := start015(t)
	pushed := h.push15("mu", "p", 1)
	pid, txn := pushed[0]["partition_id"].(string), pushed[0]["transaction_id"].(string)

	for _, path := range []string{
		messagePath(pid, "nope"),
		messagePath("00000000-0000-0000-0000-000000000000", txn),
	} {
		st, _, raw := h.do("GET", path, nil)
		assert.Equal(t, http.StatusOK, st, path)
		assert.JSONEq(t, `{"error":"Message not found"}`, string(raw), path)
	}
	st, _, raw := h.do("GET", messagePath("notauuid", txn), nil)
	assert.Equal(t, http.StatusOK, st)
	assert.JSONEq(t, `{"success":false,"error":"ERROR:  invalid input syntax for type uuid: \"notauuid\"\nCONTEXT:  unnamed portal parameter $1 = '...'\n"}`, string(raw))

	// Another queue's partition does not hold the message.
	other := h.push15("mu2", "p", 2)
	assert.Equal(t, map[string]any{"error": "Message not found"}, h.obj("GET", messagePath(other[0]["partition_id"].(string), txn), nil))

	// The 2.x profile has the route (TestMessageView2x); a 0.15.1 address
	// is unknown there.
	s2 := Start(t)
	h2 := newHC(t, s2)
	st, _, raw = h2.do("GET", messagePath(pid, txn), nil)
	assert.Equal(t, http.StatusNotFound, st)
	assert.JSONEq(t, `{"error":"Message not found"}`, string(raw))
	st, _, _ = h2.do("DELETE", messagePath(pid, txn), nil)
	assert.Equal(t, http.StatusNotFound, st)
}

// TestBroker015MessageViewQueueMode: a leased message is processing with
// the lease's expiry; once acked it is completed.
func TestBroker015MessageViewQueueMode(t *testing.T) {
	h := start015(t)
	configure(h.hc, "mq", item{"leaseTime": 45})
	h.push15("mq", "p", 0, 1)
	p := h.pop15("mq", vals("batch", "1"))
	require.Len(t, p.Messages, 1)
	m := p.Messages[0]
	path := messagePath(m.PartitionID, m.TransactionID)

	v := h.obj("GET", path, nil)
	exp := t0.Add(45 * time.Second).Format("2006-01-02T15:04:05.000Z")
	assert.Equal(t, "processing", v["status"])
	assert.Equal(t, exp, v["leaseExpiresAt"])
	assert.Equal(t, map[string]any{"busGroupsCount": 0.0, "consumedByGroups": 0.0, "hasQueueMode": true, "type": "queue"}, v["mode"])
	assert.Equal(t, []any{map[string]any{"name": "__QUEUE_MODE__", "consumed": false, "leaseExpiresAt": exp}}, v["consumerGroups"])

	// After the lease expires, pending again (the expiry still shows).
	h.clock.Advance(46 * time.Second)
	v = h.obj("GET", path, nil)
	assert.Equal(t, "pending", v["status"])
	assert.Equal(t, exp, v["leaseExpiresAt"])

	p = h.pop15("mq", vals("batch", "1"))
	require.Len(t, p.Messages, 1)
	h.batchAck("", ackItem(p.Messages[0], "completed"))
	v = h.obj("GET", path, nil)
	assert.Equal(t, "completed", v["status"])
	assert.Equal(t, true, v["consumerGroups"].([]any)[0].(map[string]any)["consumed"])
}

// TestBroker015MessageViewBusAndDeadLetter: with groups only, completed
// needs every group; a dead-lettered message is dead_letter with its error
// and retry count.
func TestBroker015MessageViewBusAndDeadLetter(t *testing.T) {
	h := start015(t)
	configure(h.hc, "mb", item{"retryLimit": 0})
	h.push15("mb", "p", 0)
	p := h.pop15("mb", vals("consumerGroup", "g1", "subscriptionMode", "all"))
	require.Len(t, p.Messages, 1)
	m := p.Messages[0]
	h.batchAck("g1", ackItem(m, "completed"))
	path := messagePath(m.PartitionID, m.TransactionID)

	v := h.obj("GET", path, nil)
	assert.Equal(t, "completed", v["status"], "the one group consumed it")
	assert.Equal(t, map[string]any{"busGroupsCount": 1.0, "consumedByGroups": 1.0, "hasQueueMode": false, "type": "bus"}, v["mode"])

	p = h.pop15("mb", vals("consumerGroup", "g2", "subscriptionMode", "all"))
	require.Len(t, p.Messages, 1)
	v = h.obj("GET", path, nil)
	assert.Equal(t, "pending", v["status"], "g2 has not consumed it")
	assert.Equal(t, map[string]any{"busGroupsCount": 2.0, "consumedByGroups": 1.0, "hasQueueMode": false, "type": "bus"}, v["mode"])
	assert.Nil(t, v["leaseExpiresAt"], "only the queue-mode lease shows at the top")
	groups := v["consumerGroups"].([]any)
	require.Len(t, groups, 2)
	assert.Equal(t, "g1", groups[0].(map[string]any)["name"])
	assert.Nil(t, groups[0].(map[string]any)["leaseExpiresAt"])
	assert.NotNil(t, groups[1].(map[string]any)["leaseExpiresAt"])

	a := ackItem(p.Messages[0], "failed")
	a["error"] = "boom"
	require.Equal(t, true, h.batchAck("g2", a)[0]["dlq"])
	v = h.obj("GET", path, nil)
	assert.Equal(t, "dead_letter", v["status"])
	assert.Equal(t, "boom", v["errorMessage"])
	assert.Equal(t, 0.0, v["retryCount"])
	assert.Equal(t, map[string]any{"busGroupsCount": 2.0, "consumedByGroups": 2.0, "hasQueueMode": false, "type": "bus"}, v["mode"],
		"the dead-lettered message is past g2's cursor")
	assert.Nil(t, v["consumerGroups"].([]any)[1].(map[string]any)["leaseExpiresAt"], "its lease released")
}

// TestBroker015DeleteMessage: DELETE /api/v1/messages/{pid}/{txn} is
// delete_message_v1: the message leaves its partition, its dead-letter row
// goes with it (ON DELETE CASCADE), its transactionId is free again, and
// the answer is always HTTP 200.
func TestBroker015DeleteMessage(t *testing.T) {
	h := start015(t)
	configure(h.hc, "md", item{"retryLimit": 0})
	pushed := h.push15("md", "p", item{"n": 0}, item{"n": 1}, item{"n": 2})
	pid := pushed[0]["partition_id"].(string)
	g := vals("consumerGroup", "g", "subscriptionMode", "all", "batch", "1")
	p := h.pop15("md", g)
	require.Equal(t, []int{0}, ns(t, p.Messages))
	h.batchAck("g", ackItem(p.Messages[0], "completed"))
	p = h.pop15("md", g)
	require.Equal(t, []int{1}, ns(t, p.Messages))
	m1 := p.Messages[0]
	require.Equal(t, true, h.batchAck("g", ackItem(m1, "failed"))[0]["dlq"])
	require.Equal(t, "dead_letter", h.obj("GET", messagePath(pid, m1.TransactionID), nil)["status"])

	// Any case is read; the answer names the partition as PostgreSQL writes it.
	del := h.obj("DELETE", messagePath(strings.ToUpper(pid), m1.TransactionID), nil)
	assert.Equal(t, map[string]any{"success": true, "partitionId": pid, "transactionId": m1.TransactionID,
		"message": "Message deleted successfully"}, del)
	assert.Equal(t, map[string]any{"error": "Message not found"}, h.obj("GET", messagePath(pid, m1.TransactionID), nil))
	dlq := h.obj("GET", "/api/v1/dlq?queue=md", nil)
	assert.Equal(t, []any{}, dlq["messages"], "the dead-letter row went with the message")

	// Deleted again, or never there: success false, still 200.
	assert.Equal(t, map[string]any{"success": false, "partitionId": pid, "transactionId": m1.TransactionID,
		"message": "Message not found"}, h.obj("DELETE", messagePath(pid, m1.TransactionID), nil))
	st, _, raw := h.do("DELETE", messagePath("notauuid", m1.TransactionID), nil)
	assert.Equal(t, http.StatusOK, st)
	assert.JSONEq(t, `{"success":false,"error":"ERROR:  invalid input syntax for type uuid: \"notauuid\"\nCONTEXT:  unnamed portal parameter $1 = '...'\n"}`, string(raw))

	// The rest of the partition is read as before, and the transactionId
	// can be pushed again.
	p = h.pop15("md", g)
	assert.Equal(t, []int{2}, ns(t, p.Messages))
	again := h.arr("POST", "/api/v1/push", item{"items": []item{{"queue": "md", "partition": "p", "payload": 9, "transactionId": m1.TransactionID}}})
	assert.Equal(t, "queued", again[0]["status"])
}

// TestBroker015DeleteConsumedFirstMessage: a group's cursor on a deleted
// message still names it: the cursor is not NULL, so a later
// subscriptionMode=new pop does not jump it to the partition's end.
func TestBroker015DeleteConsumedFirstMessage(t *testing.T) {
	h := start015(t)
	pushed := h.push15("mf", "p", item{"n": 0}, item{"n": 1})
	p := h.pop15("mf", vals("consumerGroup", "g", "subscriptionMode", "all", "batch", "1"))
	require.Equal(t, []int{0}, ns(t, p.Messages))
	h.batchAck("g", ackItem(p.Messages[0], "completed"))
	require.Equal(t, true, h.obj("DELETE", messagePath(p.Messages[0].PartitionID, pushed[0]["transaction_id"].(string)), nil)["success"])
	h.clock.Advance(time.Second)
	p = h.pop15("mf", vals("consumerGroup", "g", "subscriptionMode", "new", "batch", "5"))
	assert.Equal(t, []int{1}, ns(t, p.Messages))
}
