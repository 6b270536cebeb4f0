package queentest

import (
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
// point on the envelope). The upstream list filters by queue and
// consumerGroup; partition (name), from and to (failedAt bounds) are
// honoured here as well, as PROTOCOL.md §7 lists them.

func (r *dlqRow) wire() wire.DLQMessage {
	group, msg, off := r.group, r.errMsg, r.offset
	return wire.DLQMessage{
		ID: r.id, Queue: r.queue, Partition: r.partition, PartitionID: r.wireID,
		CreatedAt: isoMicros(r.failedAt), ConsumerGroup: &group, Offset: &off, MessageID: r.messageID,
		TransactionID: r.txn, Data: r.payload, Payload: r.payload, ErrorMessage: &msg,
		RetryCount: r.retryCount, FailedAt: isoMicros(r.failedAt),
	}
}

// handleDLQList is GET /api/v1/dlq?queue=&consumerGroup=&partition=&from=&to=&limit=&offset=.
func (s *Server) handleDLQList(w *recorder, req *request) {
	q := req.query
	limit, offset := 100, 0
	if n, err := strconv.Atoi(q.Get("limit")); err == nil {
		limit = min(max(n, 1), 1000)
	}
	if n, err := strconv.Atoi(q.Get("offset")); err == nil && n > 0 {
		offset = n
	}
	from, hasFrom := parseTime(q.Get("from"))
	to, hasTo := parseTime(q.Get("to"))
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	var rows []*dlqRow
	for _, r := range b.dlq {
		switch {
		case q.Get("queue") != "" && r.queue != q.Get("queue"):
		case q.Get("consumerGroup") != "" && r.group != q.Get("consumerGroup"):
		case q.Get("partition") != "" && r.partition != q.Get("partition"):
		case hasFrom && r.failedAt.Before(from):
		case hasTo && r.failedAt.After(to):
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
// 404 {"success":false,"result":"gone"} when there is no such row.
func (s *Server) handleDLQReplay(w *recorder, req *request) {
	id := req.params[0]
	s.replayDLQ(w, req, func(r *dlqRow) bool { return r.id == id })
}

// handleDLQRetryByAddress is POST /api/v1/messages/{partitionId}/{transactionId}/retry,
// the same replay addressed by the message.
func (s *Server) handleDLQRetryByAddress(w *recorder, req *request) {
	pid, txn := req.params[0], req.params[1]
	s.replayDLQ(w, req, func(r *dlqRow) bool { return strconv.FormatInt(r.pid, 10) == pid && r.txn == txn })
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
	result, status := "moved", wire.PushQueued
	if dup {
		result, status = "duplicate", wire.PushDuplicate
	} else {
		delete(b.dlq, row.id)
	}
	b.bump()
	w.json(http.StatusOK, map[string]any{
		"success": true, "result": result, "queue": queue, "partition": part, "consumerGroup": row.group,
		"dlqId": row.id, "originalTransactionId": row.txn,
		"replayedAs": map[string]any{
			"index": 0, "message_id": m.id, "transaction_id": txn, "queueName": queue, "status": status, "offset": m.offset,
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
