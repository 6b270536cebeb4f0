package queentest

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"
)

// The push route of the 0.15.1 profile (server/src/routes/push.cpp and the
// stored procedure push_messages_v3 of 001_push.sql).

// push015Result is one entry of a 0.15.1 push answer. A queued item has
// partition_id and trace_id, a duplicate has neither; there is no offset.
type push015Result struct {
	Index         int     `json:"index"`
	MessageID     string  `json:"message_id"`
	PartitionID   *string `json:"partition_id,omitempty"`
	QueueName     string  `json:"queueName"`
	Status        string  `json:"status"`
	TraceID       *string `json:"trace_id,omitempty"`
	TransactionID string  `json:"transaction_id"`
	queued        bool
}

// MarshalJSON writes trace_id (null or a UUID) on queued items only.
func (r push015Result) MarshalJSON() ([]byte, error) {
	type plain push015Result
	if !r.queued {
		return json.Marshal(plain(r))
	}
	return json.Marshal(struct {
		plain
		TraceID *string `json:"trace_id"`
	}{plain(r), r.TraceID})
}

// push015Item is one validated item.
type push015Item struct {
	queue, partition, txn, trace string
	payload                      json.RawMessage
}

// handlePush015 is POST /api/v1/push on the 0.15.1 profile.
//
//   - 400 {"error"} before anything is stored: items must be an array; each
//     item needs a string queue; partition, transactionId and traceId must be
//     strings when present. Empty strings are accepted (an empty queue or
//     partition name included); partition defaults to "Default", payload to
//     {}, a missing or empty transactionId is minted (a random version 4
//     UUID, not the message id), an empty traceId is none.
//   - 201 [] for no items.
//   - When the database refuses the batch (a traceId that is not a UUID, a
//     queue, partition or transactionId longer than its 255-character
//     column), nothing is stored and every item is answered
//     {"queue","status":"buffered"}: the broker files them in its failover
//     buffer, which can never write them.
//   - Otherwise 200 (the broker's status bug) with one entry per item:
//     queued, or duplicate of a message with the same transactionId in the
//     partition (earlier, or earlier in this request).
func (s *Server) handlePush015(w *recorder, req *request) {
	var body map[string]json.RawMessage
	if !w.readBody015(req.body, &body) {
		return
	}
	var raws []json.RawMessage
	if jsonKind(body["items"]) != "array" || json.Unmarshal(body["items"], &raws) != nil {
		w.plainError(http.StatusBadRequest, "items array is required")
		return
	}
	items := make([]push015Item, 0, len(raws))
	for _, raw := range raws {
		var it map[string]json.RawMessage
		_ = json.Unmarshal(raw, &it)
		if k := jsonKind(it["partition"]); k != "" && k != "string" {
			w.plainError(http.StatusBadRequest, "Partition must be a string")
			return
		}
		queue, ok := jsonString(it["queue"])
		if !ok {
			w.plainError(http.StatusBadRequest, "Queue must be a string")
			return
		}
		if k := jsonKind(it["transactionId"]); k != "" && k != "string" {
			w.plainError(http.StatusBadRequest, "TransactionId must be a string")
			return
		}
		if k := jsonKind(it["traceId"]); k != "" && k != "string" {
			w.plainError(http.StatusBadRequest, "TraceId must be a string")
			return
		}
		p := push015Item{queue: queue, partition: "Default", payload: json.RawMessage("{}")}
		if v, ok := jsonString(it["partition"]); ok {
			p.partition = v
		}
		if raw, ok := it["payload"]; ok {
			p.payload = raw
		}
		p.txn, _ = jsonString(it["transactionId"])
		p.trace, _ = jsonString(it["traceId"])
		items = append(items, p)
	}
	if len(items) == 0 {
		w.json(http.StatusCreated, []push015Result{})
		return
	}
	for _, it := range items {
		if it.trace != "" && !isUUID(it.trace) || tooLong015(it.queue) || tooLong015(it.partition) || tooLong015(it.txn) {
			out := make([]map[string]string, len(items))
			for i, it := range items {
				out[i] = map[string]string{"queue": it.queue, "status": "buffered"}
			}
			w.json(http.StatusOK, out)
			return
		}
	}

	b := s.b
	b.mu.Lock()
	now := b.now()
	out := make([]push015Result, len(items))
	var stored []storedRow015
	for i, it := range items {
		var trace *string
		if it.trace != "" {
			t := strings.ToLower(it.trace)
			trace = &t
		}
		b.queueOf015(it.queue, now)
		if it.txn == "" {
			it.txn = newUUID4() // gen_random_uuid(), not the message id
		}
		m, dup := b.pushOne(it.queue, it.partition, it.payload, it.txn, trace, now)
		out[i] = push015Result{Index: i, MessageID: m.id, QueueName: it.queue, Status: "duplicate", TransactionID: m.txn}
		if !dup {
			pid := b.queues[it.queue].byName[it.partition].uuid
			out[i].Status, out[i].PartitionID, out[i].TraceID, out[i].queued = "queued", &pid, trace, true
			b.pushedTo(it.queue)
			stored = append(stored, storedRow015{pid, m})
		}
	}
	storeRows015(stored)
	b.bump()
	b.mu.Unlock()
	w.json(http.StatusOK, out)
}

// queueOf015 creates the queue name as a 0.15.1 push does when it is new:
// the column defaults, with a namespace and task read from a dotted name
// ("orders.email": namespace orders, task email). Callers hold mu.
func (b *broker) queueOf015(name string, now time.Time) *queue {
	if q := b.queues[name]; q != nil {
		return q
	}
	q := b.queueOf(name, b.implicitConfig(), now)
	parts := strings.SplitN(name, ".", 3)
	q.namespace = parts[0]
	if len(parts) > 1 {
		q.task = parts[1]
	}
	return q
}

// storedRow015 is a message one 0.15.1 push stored, with its partition id.
type storedRow015 struct {
	partitionID string
	m           *message
}

// storeRows015 orders the rows of the messages one push stored as
// push_messages_v3's INSERT does: by partition id, then transaction id (the
// order of its dedup window; ids and the C.UTF-8 collation compare bytes),
// whatever the order of the items. Nothing reads rows but the DLQ list,
// where they order letters of one failure time.
func storeRows015(stored []storedRow015) {
	rows := make([]int64, len(stored))
	for i, s := range stored {
		rows[i] = s.m.row
	}
	slices.Sort(rows)
	slices.SortStableFunc(stored, func(a, b storedRow015) int {
		return cmp.Or(strings.Compare(a.partitionID, b.partitionID), strings.Compare(a.m.txn, b.m.txn))
	})
	for i, s := range stored {
		s.m.row = rows[i]
	}
}
