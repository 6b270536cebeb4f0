package queentest

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// The transaction route of the 0.15.1 profile
// (server/src/routes/transactions.cpp and the stored procedure
// execute_transaction_v2 of 004_transaction.sql).

// handleTransaction015 is POST /api/v1/transaction on the 0.15.1 profile.
// operations must be a non-empty array (400 otherwise). A push operation's
// items become one operation each, in order; an operation without items is
// taken as one inline push or an ack. The operations run in order in one
// database transaction, and the first failure rolls everything back:
//
//   - push: like a plain push, but a transactionId already stored in the
//     partition (or earlier in the transaction) fails, as does a traceId
//     that is not a UUID or a name longer than 255 characters.
//   - ack: the message must exist ("Message not found"); a non-empty
//     leaseId must be the group's live lease on the partition at that point
//     ("Invalid or expired lease"). completed moves the cursor to the
//     message (creating the cursor if the group has none) and releases the
//     lease when the claim's batch is complete; failed and dlq dead-letter
//     the message at once (retry count 0), move the cursor to it and
//     release the lease; any other status (retry included) fails.
//
// The answer is 200 {transactionId, success:true, results} on commit and
// {transactionId, success:false, error, results} on rollback, results
// holding the operations run until the failure.
func (s *Server) handleTransaction015(w *recorder, req *request) {
	var body map[string]json.RawMessage
	if !w.readBody015(req.body, &body) {
		return
	}
	var ops []json.RawMessage
	if jsonKind(body["operations"]) != "array" || json.Unmarshal(body["operations"], &ops) != nil {
		w.plainError(http.StatusBadRequest, "operations array required")
		return
	}
	if len(ops) == 0 {
		w.plainError(http.StatusBadRequest, "operations array cannot be empty")
		return
	}
	// The route's flattening: push items become operations of their own.
	var flat []map[string]json.RawMessage
	for _, raw := range ops {
		var op map[string]json.RawMessage
		_ = json.Unmarshal(raw, &op)
		if k := jsonKind(op["type"]); k != "" && k != "string" {
			w.plainError(http.StatusInternalServerError, "[json.exception.type_error.302] type must be string, but is "+k)
			return
		}
		typ, _ := jsonString(op["type"])
		var items []json.RawMessage
		if typ != "push" || jsonKind(op["items"]) != "array" || json.Unmarshal(op["items"], &items) != nil {
			flat = append(flat, op)
			continue
		}
		for _, raw := range items {
			var it map[string]json.RawMessage
			_ = json.Unmarshal(raw, &it)
			for _, k := range []string{"queue", "partition"} {
				if kind := jsonKind(it[k]); kind != "" && kind != "string" {
					w.plainError(http.StatusInternalServerError, "[json.exception.type_error.302] type must be string, but is "+kind)
					return
				}
			}
			q, _ := jsonString(it["queue"])
			one := map[string]json.RawMessage{"type": json.RawMessage(`"push"`), "partition": json.RawMessage(`"Default"`), "payload": json.RawMessage("{}")}
			one["queue"], _ = json.Marshal(q)
			for _, k := range []string{"partition", "payload", "transactionId", "traceId"} {
				if v, ok := it[k]; ok {
					one[k] = v
				}
			}
			flat = append(flat, one)
		}
	}

	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	tx := &txn015{b: b, now: b.now(), dlqSeq: b.dlqSeq}
	results := []map[string]any{}
	errMsg := ""
	for i, op := range flat {
		r, err := tx.run(i, op)
		if r != nil {
			results = append(results, r)
		}
		if err != "" {
			errMsg = err
			break
		}
	}
	id := newUUID4()
	if errMsg != "" {
		tx.rollback()
		w.json(http.StatusOK, map[string]any{"transactionId": id, "success": false, "error": errMsg, "results": results})
		return
	}
	b.bump()
	w.json(http.StatusOK, map[string]any{"transactionId": id, "success": true, "results": results})
}

// txn015 runs the operations of one transaction and can take them back.
type txn015 struct {
	b      *broker
	now    time.Time
	dlqSeq int64    // dead letters filed after this one are the transaction's
	undo   []func() // in the order done; undone in reverse
}

func (t *txn015) rollback() {
	for i := len(t.undo) - 1; i >= 0; i-- {
		t.undo[i]()
	}
	for id, r := range t.b.dlq {
		if r.seq > t.dlqSeq {
			delete(t.b.dlq, id)
		}
	}
}

// keep records c's state, to put back on rollback.
func (t *txn015) keep(p *partition, group string) {
	if c := p.cursors[group]; c != nil {
		old := c.clone()
		t.undo = append(t.undo, func() { p.cursors[group] = old })
		return
	}
	t.undo = append(t.undo, func() { delete(p.cursors, group) })
}

// run applies operation i; it returns its result entry (nil when the
// database fails before writing one) and the error that rolls back ("" to
// go on).
func (t *txn015) run(i int, op map[string]json.RawMessage) (map[string]any, string) {
	b := t.b
	typ, hasType := sqlText(op["type"])
	switch typ {
	case "push":
		queue, ok := sqlText(op["queue"])
		if !ok {
			return nil, `null value in column "name" of relation "queues" violates not-null constraint`
		}
		part, ok := sqlText(op["partition"])
		if !ok {
			part = "Default"
		}
		txn, ok := sqlText(op["transactionId"])
		if !ok {
			txn = newUUID4()
		}
		payload := json.RawMessage("{}")
		if k := jsonKind(op["payload"]); k != "" && k != "null" {
			payload = op["payload"]
		} else if k := jsonKind(op["data"]); k != "" && k != "null" {
			payload = op["data"]
		}
		var trace *string
		if tr, ok := sqlText(op["traceId"]); ok && tr != "" {
			if !isUUID(tr) {
				return nil, "invalid input syntax for type uuid: \"" + tr + "\""
			}
			tr = strings.ToLower(tr)
			trace = &tr
		}
		if tooLong015(queue) || tooLong015(part) || tooLong015(txn) {
			return nil, errTooLong015
		}
		q := b.queues[queue]
		if q != nil && q.byName[part] != nil {
			if _, dup := q.byName[part].firstOffset(txn); dup {
				return nil, `duplicate key value violates unique constraint "messages_partition_transaction_unique"`
			}
		}
		if q == nil {
			t.undo = append(t.undo, func() { delete(b.queues, queue) })
			q = b.queueOf015(queue, t.now)
		}
		p := q.byName[part]
		if p == nil {
			p = b.partitionOf(q, part, t.now)
			t.undo = append(t.undo, func() {
				delete(q.byName, part)
				q.parts = q.parts[:len(q.parts)-1]
				delete(b.parts, p.id)
				delete(b.partsByUUID, p.uuid)
			})
		}
		m, _ := b.pushOne(queue, part, payload, txn, trace, t.now)
		t.undo = append(t.undo, func() {
			p.msgs = p.msgs[:len(p.msgs)-1]
			delete(p.byTxn, m.txn)
		})
		return map[string]any{
			"index": i, "type": "push", "success": true, "transactionId": m.txn,
			"messageId": m.id, "partitionId": p.uuid, "queueName": queue,
		}, ""

	case "ack":
		group, ok := sqlText(op["consumerGroup"])
		if !ok {
			group = queueModeGroup
		}
		pid, hasPID := sqlText(op["partitionId"])
		if hasPID && !isUUID(pid) {
			return nil, "invalid input syntax for type uuid: \"" + pid + "\""
		}
		leaseID, _ := sqlText(op["leaseId"])
		status, ok := sqlText(op["status"])
		if !ok {
			status = "completed"
		}
		txnText, hasTxn := sqlText(op["transactionId"])
		res := map[string]any{"index": i, "type": "ack", "success": false, "transactionId": nil, "error": nil, "dlq": false}
		if hasTxn {
			res["transactionId"] = txnText
		}
		fail := func(msg string) (map[string]any, string) {
			if msg != "" {
				res["error"] = msg
			} else {
				msg = "Unknown error"
			}
			return res, "ACK operation failed: " + msg
		}
		p := b.partsByUUID[strings.ToLower(pid)]
		off := int64(-1)
		if p != nil && hasTxn {
			if o, ok := p.firstOffset(txnText); ok {
				off = o
			}
		}
		if off < 0 {
			return fail(errMsgNotFound015)
		}
		if leaseID != "" {
			c := p.cursors[group]
			if c == nil || c.liveLease(t.now) == nil || c.lease.id != leaseID {
				return fail(errInvalidLease015)
			}
		}
		switch status {
		case "completed", "success":
			t.keep(p, group)
			c := p.cursors[group]
			if c == nil {
				c = &cursor{committed: -1, attemptOff: -1}
				p.cursors[group] = c
			}
			c.setCommitted(off, t.now)
			c.lastConsumedAt = t.now
			c.ackedCount++
			if c.ackedCount >= c.batchSize {
				c.lease, c.batchSize = nil, 0
			}
		case "failed", "dlq":
			t.keep(p, group)
			c := p.cursors[group]
			if c == nil {
				c = &cursor{committed: -1, attemptOff: -1}
				p.cursors[group] = c
			}
			msg := "Unknown error"
			if e, ok := sqlText(op["error"]); ok {
				msg = e
			}
			b.fileDLQ(p, group, off, msg, 0, t.now)
			c.setCommitted(off, t.now)
			c.lastConsumedAt = t.now
			c.lease, c.batchSize, c.ackedCount = nil, 0, 0
			res["dlq"] = true
		default:
			return fail("")
		}
		res["success"] = true
		return res, ""
	}
	name := "null"
	var typeField any
	if hasType {
		name, typeField = typ, typ
	}
	return map[string]any{"index": i, "type": typeField, "success": false, "error": "Unknown operation type: " + name},
		"Unknown operation type: " + name
}
