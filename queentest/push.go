package queentest

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// maxTxnBytes is the 2.x limit on a transactionId (a u16 length prefix).
const maxTxnBytes = 65535

// handlePush is POST /api/v1/push: 201 with one result per item, in input
// order. A queue (and a partition) is created on its first push with the
// default configuration. An item whose (queue, partition, transactionId)
// repeats an earlier item of the request, or a message stored within the
// queue's dedup window (duplicateOf), is answered `duplicate` with the
// original message id and offset and stored again nowhere. Any invalid
// item fails the whole request with 400 before anything is stored.
func (s *Server) handlePush(w *recorder, req *request) {
	var body wire.PushRequest
	if !w.readJSON(req.body, &body, "bad push body: ") {
		return
	}
	if body.Items == nil { // absent or null ([] decodes to an empty slice)
		w.error(http.StatusBadRequest, "bad_body", "bad push body: missing field `items`")
		return
	}
	if len(body.Items) == 0 {
		w.json(http.StatusCreated, []wire.PushResult{})
		return
	}
	for _, it := range body.Items {
		switch {
		case it.Queue == "":
			w.error(http.StatusBadRequest, "bad_body", "bad push body: every item needs a queue")
			return
		case it.Payload == nil:
			w.error(http.StatusBadRequest, "bad_body", "bad push body: missing field `payload`")
			return
		case len(it.TransactionID) > maxTxnBytes:
			w.error(http.StatusBadRequest, "bad_request", "transactionId is longer than 65535 bytes")
			return
		}
		if nameTooLong(w, it.Queue, "", partitionName(it.Partition)) {
			return
		}
	}

	b := s.b
	b.mu.Lock()
	now := b.now()
	out := make([]wire.PushResult, len(body.Items))
	// An item repeating an earlier item of the request follows it (upstream
	// push_impl collapses them before the dedup window is consulted).
	leaders := map[[3]string]int{}
	for i, it := range body.Items {
		if it.TransactionID != "" {
			k := [3]string{it.Queue, partitionName(it.Partition), it.TransactionID}
			if l, ok := leaders[k]; ok {
				out[i] = out[l]
				out[i].Index, out[i].Status = i, wire.PushDuplicate
				continue
			}
			leaders[k] = i
		}
		m, dup := b.pushOne(it.Queue, it.Partition, it.Payload, it.TransactionID, nil, now)
		off := m.offset
		out[i] = wire.PushResult{Index: i, MessageID: m.id, TransactionID: m.txn, QueueName: it.Queue, Status: wire.PushQueued, Offset: &off}
		if dup {
			out[i].Status = wire.PushDuplicate
		}
	}
	b.bump()
	b.mu.Unlock()
	w.json(http.StatusCreated, out)
}

// repeats is the offset of the stored message a push of txn to (queue,
// partition) would repeat (duplicateOf), if there is one. Callers hold mu.
func (b *broker) repeats(queue, part, txn string, now time.Time) (int64, bool) {
	q := b.queues[queue]
	if q == nil {
		return 0, false
	}
	p := q.byName[partitionName(part)]
	if p == nil {
		return 0, false
	}
	return b.duplicateOf(p, txn, now)
}

// duplicateOf is the offset of the stored message of p that a push of txn
// at now repeats. On 0.15.1 that is any message stored under txn (a unique
// index). On 2.x it is the first one pushed within the queue's dedup window
// (dedupWindowSeconds, at most that long before now); with a window of 0,
// or once it has passed, a push of txn is stored again (upstream
// rsm/planner/push.rs plan_push_known, rsm/dedup.rs probe). Callers hold mu.
func (b *broker) duplicateOf(p *partition, txn string, now time.Time) (int64, bool) {
	offs := p.byTxn[txn]
	if b.legacy {
		return p.firstOffset(txn)
	}
	window := p.q.cfg.DedupWindowSeconds
	if window <= 0 {
		return 0, false
	}
	floor := now.Add(-time.Duration(window) * time.Second)
	for _, off := range offs {
		if !p.msgs[off].createdAt.Before(floor) {
			return off, true
		}
	}
	return 0, false
}

func partitionName(p string) string {
	if p == "" {
		return wire.DefaultPartition
	}
	return p
}

// pushOne appends one message, or finds the stored one it repeats
// (duplicateOf). A missing transactionId becomes the new message id. The
// 2.x broker parses but does not store a plain push's traceId (PROTOCOL.md
// §2), so only transaction pushes pass one. Callers hold mu.
func (b *broker) pushOne(queueName, part string, payload json.RawMessage, txn string, traceID *string, now time.Time) (*message, bool) {
	q := b.queueOf(queueName, b.implicitConfig(), now)
	if !b.legacy {
		part = partitionName(part) // 0.15.1 keeps an empty name as it is
	}
	p := b.partitionOf(q, part, now)
	id := newUUID()
	if txn == "" {
		txn = id
	}
	if off, ok := b.duplicateOf(p, txn, now); ok {
		return p.msgs[off], true
	}
	b.msgSeq++
	m := &message{
		id: id, txn: txn, traceID: traceID, seq: b.msgSeq,
		payload:   append(json.RawMessage(nil), payload...),
		createdAt: now, offset: int64(len(p.msgs)),
	}
	p.msgs = append(p.msgs, m)
	p.byTxn[txn] = append(p.byTxn[txn], m.offset)
	p.lastWrite = now
	return m, false
}
