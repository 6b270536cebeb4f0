package queentest

import (
	"encoding/json"
	"fmt"
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
		}
	}
	for i, it := range body.Items {
		if len(it.TransactionID) > maxTxnBytes {
			w.error(http.StatusBadRequest, "bad_body", fmt.Sprintf("bad push body: transactionId of item %d exceeds the %d-byte limit", i, maxTxnBytes))
			return
		}
	}
	for _, it := range body.Items {
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
	follows := make([]int, len(body.Items))
	groups := map[[2]string]*entryPlan{}
	for i, it := range body.Items {
		follows[i] = -1
		if it.TransactionID != "" {
			k := [3]string{it.Queue, partitionName(it.Partition), it.TransactionID}
			if l, ok := leaders[k]; ok {
				follows[i] = l
				continue
			}
			leaders[k] = i
		}
		b.plan(groups, it.Queue, it.Partition, it.TransactionID, it.Payload, now)
	}
	for i, it := range body.Items {
		if l := follows[i]; l >= 0 {
			out[i] = out[l]
			out[i].Index = i
			if out[i].Status != wire.PushError {
				out[i].Status = wire.PushDuplicate
			}
			continue
		}
		if groups[[2]string{it.Queue, partitionName(it.Partition)}].refused(b.entryMax) {
			// A non-retryable refusal of the group: its items are answered
			// `error` and nothing of it is stored (push_impl).
			id := newUUID()
			out[i] = wire.PushResult{Index: i, MessageID: id, TransactionID: orMinted(it.TransactionID, id), QueueName: it.Queue, Status: wire.PushError}
			continue
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
		id: id, txn: txn, traceID: traceID, seq: b.msgSeq, row: b.msgSeq,
		payload:   append(json.RawMessage(nil), payload...),
		createdAt: now, offset: int64(len(p.msgs)),
	}
	p.msgs = append(p.msgs, m)
	p.byTxn[txn] = append(p.byTxn[txn], m.offset)
	if now.After(p.lastWrite) {
		p.lastWrite = now
	}
	return m, false
}

// defaultEntryMaxBytes is the 2.x broker's bound on the planned size of one
// command (QUEEN_RAFT_ENTRY_MAX_BYTES).
const defaultEntryMaxBytes = 96 << 20

// WithEntryMaxBytes sets the 2.x broker's bound on the planned size of one
// (queue, partition) group of a push or a transaction
// (QUEEN_RAFT_ENTRY_MAX_BYTES, default 96 MiB; rsm/planner/push.rs): a
// group planned larger is refused for good, a push answering its items
// `error` in its 201 and storing nothing of that group, a transaction
// rolling back with reason "too_large". The planned size, as the broker
// counts it, is about each new message's payload and transactionId plus
// 80 bytes, and 256 bytes a group. A test sets a small bound to see the
// refusal.
func WithEntryMaxBytes(n int) Option { return func(o *options) { o.entryMax = n } }

// entryPlan is what one (queue, partition) group of a request would store.
type entryPlan struct {
	queue, partition string
	bytes            int
}

// plan counts one leader item (not repeating an earlier item of the
// request) into its group's planned size. Callers hold mu.
func (b *broker) plan(groups map[[2]string]*entryPlan, queue, part, txn string, payload json.RawMessage, now time.Time) *entryPlan {
	k := [2]string{queue, partitionName(part)}
	g := groups[k]
	if g == nil {
		g = &entryPlan{queue: queue, partition: k[1], bytes: 256}
		groups[k] = g
	}
	g.bytes += 32 // every item of the command
	if txn == "" {
		txn = "01234567-89ab-cdef-0123-456789abcdef" // the minted id's length
	}
	if _, dup := b.repeats(queue, part, txn, now); !dup {
		g.bytes += len(payload) + len(txn) + 48 // the frame and its hash
	}
	return g
}

// refused reports whether the group plans larger than max bytes.
func (g *entryPlan) refused(max int) bool { return g != nil && g.bytes > max }

func orMinted(txn, id string) string {
	if txn == "" {
		return id
	}
	return txn
}
