package queentest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/queen-go/queen/internal/wire"
)

// txnOp is one element of `operations`: a push (items, or one item inline)
// or an ack. The ack fields are those of a plain acknowledgment; a push
// uses transactionId too.
type txnOp struct {
	ackBodyItem
	Type          string          `json:"type"`
	Items         []wire.PushItem `json:"items"`
	Queue         *string         `json:"queue"`
	Partition     *string         `json:"partition"`
	Payload       json.RawMessage `json:"payload"`
	TraceID       *string         `json:"traceId"`
	ConsumerGroup *string         `json:"consumerGroup"`
}

type txnBody struct {
	Operations     []txnOp         `json:"operations"`
	RequiredLeases []string        `json:"requiredLeases"`
	KV             json.RawMessage `json:"kv"`
	Timers         json.RawMessage `json:"timers"`
	Positions      json.RawMessage `json:"positions"`
}

// txnRiders are the members of a transaction body that must be arrays.
var txnRiders = []string{"operations", "kv", "timers", "positions", "requiredLeases"}

// badTxnBody reads a transaction body as the 2.x broker's typed parse does
// and says why it refuses it ("" when it does not): a body that is no JSON
// object of the expected types, a rider that is not an array (named), or a
// push item without its queue or payload.
func badTxnBody(raw []byte, body *txnBody) string {
	err := decodeBody(raw, body)
	if err == nil {
		for _, r := range []json.RawMessage{body.KV, body.Timers, body.Positions} {
			if k := jsonKind(r); k != "" && k != "null" && k != "array" {
				err = errors.New("a rider is not an array")
			}
		}
	}
	if err != nil {
		var root map[string]json.RawMessage
		if json.Unmarshal(raw, &root) == nil {
			for _, k := range txnRiders {
				if kind := jsonKind(root[k]); kind != "" && kind != "null" && kind != "array" {
					return "`" + k + "` must be an array at the TOP LEVEL of the transaction body"
				}
			}
		}
		return "bad body: " + err.Error()
	}
	for _, op := range body.Operations {
		for _, it := range op.Items {
			switch {
			case it.Queue == "":
				return "bad body: missing field `queue`"
			case it.Payload == nil:
				return "bad body: missing field `payload`"
			}
		}
	}
	return ""
}

// txnResult is one entry of a committed transaction's results.
type txnResult struct {
	Index         int     `json:"index"`
	Type          string  `json:"type"`
	Success       bool    `json:"success"`
	TransactionID string  `json:"transactionId"`
	MessageID     string  `json:"messageId,omitempty"`
	QueueName     string  `json:"queueName,omitempty"`
	Duplicate     bool    `json:"duplicate,omitempty"`
	Error         *string `json:"-"`
	DLQ           *bool   `json:"dlq,omitempty"`
	ackError      bool
}

// MarshalJSON renders an ack result with its explicit "error":null.
func (r txnResult) MarshalJSON() ([]byte, error) {
	type plain txnResult
	if !r.ackError {
		return json.Marshal(plain(r))
	}
	return json.Marshal(struct {
		plain
		Error *string `json:"error"`
	}{plain(r), r.Error})
}

type txnAnswer struct {
	TransactionID string      `json:"transactionId"`
	Success       bool        `json:"success"`
	Reason        string      `json:"reason,omitempty"`
	Error         string      `json:"error,omitempty"`
	Results       []txnResult `json:"results"`
}

type txnPush struct {
	flat    int
	queue   string
	part    string
	payload json.RawMessage
	txn     string
	traceID *string
}

type txnAck struct {
	flat  int
	group string
	pid   int64
	in    ackIn
}

// handleTransaction is POST /api/v1/transaction: pushes and acks applied all
// together or not at all. Every ack is fenced by its own leaseId (a
// lease-less ack borrows the lease of requiredLeases when all hints name
// the same one); one refused ack rolls the whole transaction back, and so
// does a push that repeats a message stored within the queue's dedup
// window (duplicateOf). The answer
// is 200 on commit ({transactionId, success:true, results}) and on rollback
// ({transactionId, success:false, reason, error, results:[]}, reason
// bad_request, rejected_ack or duplicate), as the 2.x broker answers
// (rsm/facade/real.rs txn_impl, rsm/planner/txn.rs). A body the broker's
// typed parse refuses (malformed, a rider that is not an array, a push
// item without queue or payload) or an operation whose type is empty,
// unknown, kv or timer is a 400 with the same envelope, reason bad_request;
// a transactionId over 65535 bytes is a 400 {error, code:"bad_request"}.
// Unlike a plain ack, a repeat of an ack whose lease already settled is
// refused. The kv, timers and positions riders are not supported here (a
// rollback with reason bad_request).
func (s *Server) handleTransaction(w *recorder, req *request) {
	txnID := newUUID()
	fail := func(reason, msg string) {
		w.json(http.StatusOK, txnAnswer{TransactionID: txnID, Success: false, Reason: reason, Error: msg, Results: []txnResult{}})
	}
	// A body the wire refuses is a 400; a rollback verdict is a 200.
	refuse := func(msg string) {
		w.json(http.StatusBadRequest, txnAnswer{TransactionID: txnID, Success: false, Reason: "bad_request", Error: msg, Results: []txnResult{}})
	}
	var body txnBody
	if why := badTxnBody(req.body, &body); why != "" {
		refuse(why)
		return
	}
	if nonEmptyArray(body.KV) || nonEmptyArray(body.Timers) || nonEmptyArray(body.Positions) {
		fail("bad_request", "queentest does not support the kv, timers and positions riders of a transaction")
		return
	}
	if len(body.Operations) == 0 {
		fail("bad_request", "transaction requires an operations array (or a top-level kv/timers array)")
		return
	}

	var pushes []txnPush
	var acks []txnAck
	hints := map[string]bool{}
	for _, l := range body.RequiredLeases {
		if l != "" {
			hints[l] = true
		}
	}
	flat := 0
	addPush := func(queue string, part *string, payload json.RawMessage, txn, trace *string) bool {
		if len(str(txn)) > maxTxnBytes {
			w.error(http.StatusBadRequest, "bad_request", fmt.Sprintf("transactionId exceeds the %d-byte limit", maxTxnBytes))
			return false
		}
		if nameTooLong(w, queue, "", partitionName(str(part))) {
			return false
		}
		var traceID *string
		if t := str(trace); isUUID(t) {
			traceID = &t
		}
		pushes = append(pushes, txnPush{flat: flat, queue: queue, part: partitionName(str(part)), payload: payload, txn: str(txn), traceID: traceID})
		flat++
		return true
	}
	for _, op := range body.Operations {
		switch op.Type {
		case wire.TxnPush:
			if op.Items != nil {
				for _, it := range op.Items {
					txn, part := it.TransactionID, it.Partition
					if !addPush(it.Queue, &part, it.Payload, &txn, &it.TraceID) {
						return
					}
				}
				continue
			}
			if str(op.Queue) == "" || op.Payload == nil {
				fail("bad_request", "a push operation needs queue and payload")
				return
			}
			if !addPush(*op.Queue, op.Partition, op.Payload, op.TransactionID, op.TraceID) {
				return
			}
		case wire.TxnAck:
			group := groupOrQueueMode(str(op.ConsumerGroup))
			pid, err := strconv.ParseInt(str(op.PartitionID), 10, 64)
			if err != nil || pid < 0 {
				fail("bad_request", errNotPID)
				return
			}
			if l := str(op.LeaseID); l != "" {
				hints[l] = true
			}
			acks = append(acks, txnAck{flat: flat, group: group, pid: pid, in: op.ackBodyItem.in(flat)})
			flat++
		case "kv", "timer", "timers":
			refuse("kv and timer operations are TOP-LEVEL arrays of the request (\"kv\":[...], \"timers\":[...]), never elements of `operations`")
			return
		case "":
			refuse("every transaction operation needs a `type` of push or ack")
			return
		default:
			refuse(fmt.Sprintf("transaction supports only push and ack operations, got `%s`; kv and timer operations go in the TOP LEVEL `kv` / `timers` arrays", op.Type))
			return
		}
	}
	hint := ""
	if len(hints) == 1 {
		for h := range hints {
			hint = h
		}
	}

	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()

	// 1. Settle every ack on shadow cursors; nothing is stored yet.
	type shadowKey struct {
		group string
		pid   int64
	}
	shadows := map[shadowKey]*cursor{}
	var order []shadowKey
	files := map[shadowKey][]dlqFile{}
	type targetKey struct {
		group  string
		pid    int64
		worker string
	}
	var targets []targetKey
	byTarget := map[targetKey][]txnAck{}
	for _, a := range acks {
		if a.in.leaseID == "" {
			a.in.leaseID = hint
		}
		k := targetKey{a.group, a.pid, a.in.leaseID}
		if _, ok := byTarget[k]; !ok {
			targets = append(targets, k)
		}
		byTarget[k] = append(byTarget[k], a)
	}
	for _, k := range targets {
		p := b.parts[k.pid]
		if p == nil {
			fail("rejected_ack", fmt.Sprintf("QTXN no partition %d; the transaction rolled back", k.pid))
			return
		}
		sk := shadowKey{k.group, k.pid}
		cur, seen := shadows[sk]
		if !seen {
			cur = p.cursors[k.group]
			order = append(order, sk)
		}
		in := make([]ackIn, 0, len(byTarget[k]))
		for _, a := range byTarget[k] {
			in = append(in, a.in)
		}
		tr := ackTarget(p, cur, k.worker, in, b.recent, now, false)
		if tr.stale {
			why := errStaleAck
			for _, o := range tr.per {
				if o.err != "" {
					why = o.err
					break
				}
			}
			fail("rejected_ack", "QTXN "+why+"; the transaction rolled back")
			return
		}
		shadows[sk] = tr.cur
		files[sk] = append(files[sk], tr.files...)
	}

	// 2. A push that repeats a message an earlier request stored rolls the
	// whole transaction back (upstream planner/txn.rs refuses it with code
	// "duplicate"); a repeat inside this transaction only follows its first
	// occurrence.
	firsts := map[string]bool{}
	groups := map[[2]string]*entryPlan{}
	var planned []*entryPlan
	for _, p := range pushes {
		key := p.queue + "\x00" + p.part + "\x00" + p.txn
		if p.txn != "" && firsts[key] {
			continue
		}
		firsts[key] = true
		if g := b.plan(groups, p.queue, p.part, p.txn, p.payload, now); len(planned) == 0 || planned[len(planned)-1] != g {
			planned = append(planned, g)
		}
		if p.txn == "" {
			continue // a minted id repeats nothing
		}
		if off, ok := b.repeats(p.queue, p.part, p.txn, now); ok {
			fail("duplicate", fmt.Sprintf("QDUP the message pushed to %s/%s repeats a stored transactionId (original offset %d); nothing was applied", p.queue, p.part, off))
			return
		}
	}
	for _, g := range planned {
		if g.refused(b.entryMax) {
			fail("too_large", fmt.Sprintf("planned push of %d B exceeds QUEEN_RAFT_ENTRY_MAX_BYTES (%d)", g.bytes, b.entryMax))
			return
		}
	}

	// 3. Commit: the pushes, then the settled cursors and their dead letters.
	results := make([]txnResult, flat)
	leaders := map[string]*message{}
	for _, p := range pushes {
		key := p.queue + "\x00" + p.part + "\x00" + p.txn
		if m := leaders[key]; m != nil && p.txn != "" {
			// A repeat inside this transaction follows its first occurrence
			// (a repeat of an earlier request's message refused the whole
			// transaction above).
			results[p.flat] = txnResult{Index: p.flat, Type: wire.TxnPush, Success: true, TransactionID: m.txn,
				MessageID: m.id, QueueName: p.queue, Duplicate: true}
			continue
		}
		m, _ := b.pushOne(p.queue, p.part, p.payload, p.txn, p.traceID, now)
		leaders[key] = m
		results[p.flat] = txnResult{Index: p.flat, Type: wire.TxnPush, Success: true, TransactionID: m.txn, MessageID: m.id, QueueName: p.queue}
	}
	for _, sk := range order {
		p := b.parts[sk.pid]
		b.commitTarget(p, sk.group, targetResult{cur: shadows[sk], files: files[sk]}, now)
	}
	for _, a := range acks {
		dlq := a.in.status == wire.StatusDLQ
		results[a.flat] = txnResult{Index: a.flat, Type: wire.TxnAck, Success: true, TransactionID: a.in.txn, DLQ: &dlq, ackError: true}
	}
	b.bump()
	w.json(http.StatusOK, txnAnswer{TransactionID: txnID, Success: true, Results: results})
}

func nonEmptyArray(raw json.RawMessage) bool {
	var a []json.RawMessage
	if len(raw) == 0 || string(raw) == "null" {
		return false
	}
	if json.Unmarshal(raw, &a) != nil {
		return true
	}
	return len(a) > 0
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return false
			}
		default:
			if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F') {
				return false
			}
		}
	}
	return true
}
