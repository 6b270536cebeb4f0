package queentest

import (
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/queen-go/queen/internal/wire"
)

// The dead-letter routes. Looked up upstream (queen-mq/queen,
// server/src/rsm/facade/real/phase2/reads.rs api_dlq and admin.rs
// api_dlq_move): the 2.x list envelope is
// {messages, total, pagination:{limit, offset}}, newest failure first,
// limit 100 by default clamped to 1..1000 (this settles PROTOCOL.md's open
// point on the envelope). The list filters by queue and consumerGroup
// only: partition, from and to, which PROTOCOL.md §7 lists, are not read
// (§19).

func (r *dlqRow) wire() wire.DLQMessage {
	group, msg, off := r.group, r.errMsg, r.offset
	return wire.DLQMessage{
		ID: r.id, Queue: r.queue, Partition: r.partition, PartitionID: r.wireID,
		CreatedAt: isoMicros(r.failedAt), ConsumerGroup: &group, Offset: &off, MessageID: r.messageID,
		TransactionID: r.txn, Data: r.payload, Payload: r.payload, ErrorMessage: &msg,
		RetryCount: r.retryCount, FailedAt: isoMicros(r.failedAt),
	}
}

// handleDLQList is GET /api/v1/dlq?queue=&consumerGroup=&limit=&offset=.
func (s *Server) handleDLQList(w *recorder, req *request) {
	q := req.query
	limit, offset := 100, 0
	if n, err := strconv.Atoi(q.Get("limit")); err == nil {
		limit = min(max(n, 1), 1000)
	}
	if n, err := strconv.Atoi(q.Get("offset")); err == nil && n > 0 {
		offset = n
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	var rows []*dlqRow
	for _, r := range b.dlq {
		switch {
		case q.Has("queue") && r.queue != q.Get("queue"):
		case q.Has("consumerGroup") && r.group != q.Get("consumerGroup"):
		default:
			rows = append(rows, r)
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if !rows[i].failedAt.Equal(rows[j].failedAt) {
			return rows[i].failedAt.After(rows[j].failedAt)
		}
		return rows[i].seq > rows[j].seq
	})
	out := wire.DLQListResponse{Messages: []wire.DLQMessage{}, Total: len(rows), Pagination: &wire.DLQPagination{Limit: limit, Offset: offset}}
	for i := offset; i < len(rows) && i < offset+limit; i++ {
		out.Messages = append(out.Messages, rows[i].wire())
	}
	w.json(http.StatusOK, out)
}

// handleDLQReplay is POST /api/v1/dlq/{id}/replay {queue?, partition?}: the
// dead letter is pushed again (to its own queue and partition unless
// overridden) with transactionId "dlq:<id>", and its row is removed.
// 404 {"success":false,"result":"gone"} when there is no such row. When
// the copy is already stored (within the dedup window), the answer is
// result "duplicate", replayedAs.message_id the zero UUID and the row stays
// (upstream phase2/admin.rs api_dlq_move). The broker answers a push it
// refuses 409, which nothing here refuses.
func (s *Server) handleDLQReplay(w *recorder, req *request) {
	id := req.params[0]
	s.replayDLQ(w, req, func(r *dlqRow) bool { return r.id == id })
}

// handleDLQRetryByAddress is POST /api/v1/messages/{partitionId}/{transactionId}/retry,
// the same replay addressed by the message: its partition's decimal id or
// UUID, and its transactionId, both as sent (not unescaped).
func (s *Server) handleDLQRetryByAddress(w *recorder, req *request) {
	txn := req.params[1]
	s.b.mu.Lock()
	p := s.b.partitionByAddress(req.params[0])
	s.b.mu.Unlock()
	s.replayDLQ(w, req, func(r *dlqRow) bool { return p != nil && r.pid == p.id && r.txn == txn })
}

func (s *Server) replayDLQ(w *recorder, req *request, match func(*dlqRow) bool) {
	var body struct {
		Queue     *string `json:"queue"`
		Partition *string `json:"partition"`
	}
	if err := decodeJSONLenient(req.body, &body); err != nil {
		w.error(http.StatusBadRequest, "bad_body", err.Error())
		return
	}
	if body.Queue != nil && strings.TrimSpace(*body.Queue) == "" || body.Partition != nil && strings.TrimSpace(*body.Partition) == "" {
		w.json(http.StatusBadRequest, map[string]any{"success": false, "error": "queue and partition overrides must be non-empty", "code": "bad_request"})
		return
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	var row *dlqRow
	for _, r := range b.dlq {
		if match(r) && (row == nil || r.seq < row.seq) {
			row = r
		}
	}
	if row == nil {
		w.json(http.StatusNotFound, map[string]any{"success": false, "result": "gone", "error": "Message not found"})
		return
	}
	queue, part := row.queue, row.partition
	if body.Queue != nil {
		queue = strings.TrimSpace(*body.Queue)
	}
	if body.Partition != nil {
		part = strings.TrimSpace(*body.Partition)
	}
	if nameTooLong(w, queue, "", part) {
		return
	}
	txn := "dlq:" + row.id
	m, dup := b.pushOne(queue, part, row.payload, txn, nil, b.now())
	result, status, id := "moved", wire.PushQueued, m.id
	if dup {
		// The copy is already there (inside its dedup window): nothing is
		// stored, the row stays, and the answer names no message id.
		result, status, id = "duplicate", wire.PushDuplicate, zeroUUID
	} else {
		delete(b.dlq, row.id)
	}
	b.bump()
	w.json(http.StatusOK, map[string]any{
		"success": true, "result": result, "queue": queue, "partition": part, "consumerGroup": row.group,
		"dlqId": row.id, "originalTransactionId": row.txn,
		"replayedAs": map[string]any{
			"index": 0, "message_id": id, "transaction_id": txn, "queueName": queue, "status": status, "offset": m.offset,
		},
		"dlqRowRemoved": !dup,
	})
}

// handleDLQPurge is DELETE /api/v1/dlq?queue=&consumerGroup= (queue required).
func (s *Server) handleDLQPurge(w *recorder, req *request) {
	queue := req.query.Get("queue")
	if queue == "" {
		w.json(http.StatusBadRequest, map[string]any{"success": false, "error": "queue is required", "message": "Bulk DLQ purge requires an exact queue name", "code": "bad_request"})
		return
	}
	group := req.query.Get("consumerGroup")
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for id, r := range b.dlq {
		if r.queue == queue && (group == "" || r.group == group) {
			delete(b.dlq, id)
			n++
		}
	}
	var g any
	if req.query.Has("consumerGroup") {
		g = group
	}
	w.json(http.StatusOK, map[string]any{"success": true, "queue": queue, "consumerGroup": g, "deleted": n})
}

// The 0.15.1 list (server/src/routes/dlq.cpp, get_dlq_messages_v1 in
// lib/schema/procedures/010_messages.sql; PROTOCOL.md §17): the route reads
// queue, consumerGroup, limit (default 100) and offset (default 0), each
// number as std::stoi does, a number it cannot read being the default;
// partition, from and to are not read. The procedure aggregates every
// matching row into one JSON row and applies LIMIT and OFFSET to that one
// row: the limit never cuts the list, and an offset of 1 or more, or a limit
// of 0, leaves no row, which the route answers {"success":true,"value":null}.
// Entries carry the message's id (there is no dead-letter row id), the
// message's creation time and the failure time, both to the millisecond,
// newest failure first; there is no total. The procedure orders by the
// failure time alone, and one batch ack dead-letters a whole pop at one
// time: such ties come in the order of their messages' rows (message.row),
// the order the real broker's plan read them in, which is neither the
// order of the pushed items nor that of the ack. (Another plan may read
// them otherwise: a client must not depend on it.) Letters of one message
// for several groups, newest first.

type dlqEntry015 struct {
	ID            string          `json:"id"`
	TransactionID string          `json:"transactionId"`
	PartitionID   string          `json:"partitionId"`
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	ConsumerGroup string          `json:"consumerGroup"`
	ErrorMessage  string          `json:"errorMessage"`
	RetryCount    int             `json:"retryCount"`
	Data          json.RawMessage `json:"data"`
	ProducerSub   *string         `json:"producerSub"`
	CreatedAt     string          `json:"createdAt"`
	FailedAt      string          `json:"failedAt"`
}

// stoi reads s as std::stoi does: optional blanks and sign, then the
// leading digits; ok is false when there are none (or the value overflows
// an int32).
func stoi(s string) (int, bool) {
	s = strings.TrimLeft(s, " \t\n\r\f\v")
	end := 0
	if end < len(s) && (s[end] == '+' || s[end] == '-') {
		end++
	}
	digits := end
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	if end == digits {
		return 0, false
	}
	n, err := strconv.ParseInt(s[:end], 10, 32)
	if err != nil {
		return 0, false
	}
	return int(n), true
}

// handleDLQList015 is GET /api/v1/dlq on the 0.15.1 profile.
func (s *Server) handleDLQList015(w *recorder, req *request) {
	q := req.query
	limit, offset := 100, 0
	if v := q.Get("limit"); v != "" {
		if n, ok := stoi(v); ok {
			limit = n
		}
	}
	if v := q.Get("offset"); v != "" {
		if n, ok := stoi(v); ok {
			offset = n
		}
	}
	if limit < 0 {
		w.dbError("LIMIT must not be negative")
		return
	}
	if offset < 0 {
		w.dbError("OFFSET must not be negative")
		return
	}
	queue, group := q.Get("queue"), q.Get("consumerGroup")
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if limit == 0 || offset > 0 {
		w.json(http.StatusOK, map[string]any{"success": true, "value": nil})
		return
	}
	var rows []*dlqRow
	for _, r := range b.dlq {
		if (queue == "" || r.queue == queue) && (group == "" || r.group == group) {
			rows = append(rows, r)
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if !rows[i].failedAt.Equal(rows[j].failedAt) {
			return rows[i].failedAt.After(rows[j].failedAt)
		}
		if rows[i].row != rows[j].row {
			return rows[i].row < rows[j].row
		}
		return rows[i].seq > rows[j].seq
	})
	entries := make([]dlqEntry015, 0, len(rows))
	for _, r := range rows {
		created := r.failedAt
		if p := b.parts[r.pid]; p != nil && r.offset >= 0 && r.offset < int64(len(p.msgs)) {
			created = p.msgs[r.offset].createdAt
		}
		entries = append(entries, dlqEntry015{
			ID: r.messageID, TransactionID: r.txn, PartitionID: r.wireID, Queue: r.queue, Partition: r.partition,
			ConsumerGroup: r.group, ErrorMessage: r.errMsg, RetryCount: r.retryCount, Data: r.payload,
			CreatedAt: isoMillis015(created), FailedAt: isoMillis015(r.failedAt),
		})
	}
	w.json(http.StatusOK, map[string]any{"messages": entries, "pagination": map[string]int{"limit": limit, "offset": offset}})
}
