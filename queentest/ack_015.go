package queentest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
)

// The ack routes of the 0.15.1 profile (server/src/routes/ack.cpp and the
// stored procedure ack_messages_v2 of 003_ack.sql).

// Per-item ack errors of 0.15.1.
const (
	errMsgNotFound015  = "Message not found"
	errInvalidLease015 = "Invalid or expired lease"
)

// ack015Result is one entry of a 0.15.1 ack answer: queueName and
// partitionName (null when the partition is unknown), no noop.
// leaseReleased is null for a completed ack of a group that has no cursor
// on the partition.
type ack015Result struct {
	Index         int     `json:"index"`
	TransactionID string  `json:"transactionId"`
	Success       bool    `json:"success"`
	Error         *string `json:"error"`
	QueueName     *string `json:"queueName"`
	PartitionName *string `json:"partitionName"`
	LeaseReleased *bool   `json:"leaseReleased"`
	DLQ           bool    `json:"dlq"`
}

// ack015In is one acknowledgment as the route hands it to the database.
type ack015In struct {
	index   int
	txn     string
	pid     string
	group   string
	leaseID string // "" = no lease check
	status  string
	errMsg  *string
}

// handleAck015 is POST /api/v1/ack on the 0.15.1 profile: transactionId and
// partitionId strings are required (400 otherwise); status defaults to
// completed, consumerGroup to queue mode. The answer is a one-item array.
func (s *Server) handleAck015(w *recorder, req *request) {
	var body map[string]json.RawMessage
	if !w.readBody015(req.body, &body) {
		return
	}
	txn, ok := jsonString(body["transactionId"])
	if !ok {
		w.plainError(http.StatusBadRequest, "transactionId is required")
		return
	}
	in := ack015In{txn: txn, group: queueModeGroup, status: "completed"}
	if v, ok := jsonString(body["status"]); ok {
		in.status = v
	}
	if v, ok := jsonString(body["consumerGroup"]); ok {
		in.group = v
	}
	e, _ := jsonString(body["error"]) // the route always sends one, "" by default
	in.errMsg = &e
	in.leaseID, _ = jsonString(body["leaseId"])
	if in.pid, ok = jsonString(body["partitionId"]); !ok {
		w.plainError(http.StatusBadRequest, "partitionId is required to ensure message uniqueness")
		return
	}
	s.runAck015(w, []ack015In{in})
}

// handleAckBatch015 is POST /api/v1/ack/batch on the 0.15.1 profile:
// {"consumerGroup"?, "acknowledgments":[...]}, the group top-level only.
func (s *Server) handleAckBatch015(w *recorder, req *request) {
	var body map[string]json.RawMessage
	if !w.readBody015(req.body, &body) {
		return
	}
	var acks []json.RawMessage
	if jsonKind(body["acknowledgments"]) != "array" || json.Unmarshal(body["acknowledgments"], &acks) != nil {
		w.plainError(http.StatusBadRequest, "acknowledgments array is required")
		return
	}
	group := queueModeGroup
	if v, ok := jsonString(body["consumerGroup"]); ok {
		group = v
	}
	items := make([]ack015In, 0, len(acks))
	for i, raw := range acks {
		var it map[string]json.RawMessage
		_ = json.Unmarshal(raw, &it)
		txn, ok := jsonString(it["transactionId"])
		if !ok {
			w.plainError(http.StatusBadRequest, "Each acknowledgment must have a valid transactionId string")
			return
		}
		pid, ok := jsonString(it["partitionId"])
		if !ok {
			w.plainError(http.StatusBadRequest, "Each acknowledgment must have a valid partitionId string to ensure message uniqueness")
			return
		}
		in := ack015In{index: i, txn: txn, pid: pid, group: group, status: "completed"}
		if v, ok := sqlText(it["status"]); ok {
			in.status = v
		}
		in.leaseID, _ = sqlText(it["leaseId"])
		if v, ok := sqlText(it["error"]); ok {
			in.errMsg = &v
		}
		items = append(items, in)
	}
	s.runAck015(w, items)
}

// sqlText is what PostgreSQL's ->> gives for raw: a string's text, another
// value's JSON text, false for an absent key or null.
func sqlText(raw json.RawMessage) (string, bool) {
	switch jsonKind(raw) {
	case "", "null":
		return "", false
	case "string":
		return jsonString(raw)
	}
	return strings.TrimSpace(string(raw)), true
}

func (s *Server) runAck015(w *recorder, items []ack015In) {
	for _, it := range items {
		if !isUUID(it.pid) {
			// The whole call fails on the cast, as a database error.
			w.dbError(fmt.Sprintf("invalid input syntax for type uuid: %q\nCONTEXT:  PL/pgSQL function ack_messages_v2(jsonb) line 14 at FOR over SELECT rows", it.pid))
			return
		}
	}
	b := s.b
	b.mu.Lock()
	out := b.ack015(items, b.now())
	b.bump()
	b.mu.Unlock()
	w.json(http.StatusOK, out)
}

// ack015 applies acknowledgments as ack_messages_v2 does. Callers hold mu.
//
//   - Every item is checked first, against the state before the call: its
//     message must exist in the partition ("Message not found") and a
//     non-empty leaseId must be the live lease of the group's cursor there
//     ("Invalid or expired lease"). So within one call a release by an
//     earlier item does not refuse a later one, while a later call is
//     refused.
//   - Items are then applied in message order per partition.
//   - completed (or success) moves the cursor to the message and counts it;
//     the ack that reaches the claim's batch size releases the lease and
//     resets the retry budget (leaseReleased says whether no lease is left).
//   - failed with budget left (batch_retry_count < retryLimit) releases the
//     lease and spends one retry, once per lease; the cursor stays, so the
//     message and the rest of the batch come back at once.
//   - failed with the budget spent, and dlq always, dead-letter the message
//     and move the cursor to it; the lease is kept until the ack that
//     reaches the batch size (leaseReleased:false always).
//   - retry releases the lease, spending nothing.
//   - Any other status does nothing: success:false with no error.
func (b *broker) ack015(items []ack015In, now time.Time) []ack015Result {
	type row struct {
		p    *partition
		off  int64 // -1: no such message
		verr string
	}
	rows := make([]row, len(items))
	for i, it := range items {
		r := row{p: b.partsByUUID[strings.ToLower(it.pid)], off: -1}
		if r.p != nil {
			if off, ok := r.p.firstOffset(it.txn); ok {
				r.off = off
			}
		}
		switch {
		case r.off < 0:
			r.verr = errMsgNotFound015
		case it.leaseID != "":
			c := r.p.cursors[it.group]
			if c == nil || c.liveLease(now) == nil || c.lease.id != it.leaseID {
				r.verr = errInvalidLease015
			}
		}
		rows[i] = r
	}
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(x, y int) bool {
		a, c := items[order[x]], items[order[y]]
		ra, rc := rows[order[x]], rows[order[y]]
		if pa, pc := strings.ToLower(a.pid), strings.ToLower(c.pid); pa != pc {
			return pa < pc
		}
		if a.group != c.group {
			return a.group < c.group
		}
		if (ra.off < 0) != (rc.off < 0) {
			return rc.off < 0 // an unknown message sorts last
		}
		return ra.off < rc.off
	})

	out := make([]ack015Result, len(items))
	for _, i := range order {
		it, r := items[i], rows[i]
		res := ack015Result{Index: it.index, TransactionID: it.txn}
		released := func(v bool) { res.LeaseReleased = &v }
		released(false)
		if r.p != nil {
			qn, pn := r.p.q.name, r.p.name
			res.QueueName, res.PartitionName = &qn, &pn
		}
		if r.verr != "" {
			e := r.verr
			res.Error = &e
			out[i] = res
			continue
		}
		c := r.p.cursors[it.group]
		switch it.status {
		case "completed", "success":
			res.Success = true
			if c == nil {
				res.LeaseReleased = nil // the update found no cursor to report on
				break
			}
			c.setCommitted(r.off, now)
			c.lastConsumedAt = now
			if c.ackedCount+1 >= c.batchSize && c.batchSize > 0 {
				c.ackedCount, c.lease, c.batchRetry = 0, nil, 0
			} else {
				c.ackedCount++
			}
			released(c.lease == nil)
		case "failed", "dlq":
			if c != nil && c.batchRetry < r.p.q.cfg.RetryLimit && it.status != "dlq" {
				if c.lease != nil {
					c.lease, c.batchSize, c.ackedCount = nil, 0, 0
					c.batchRetry++
				}
				res.Success = true
				released(true)
				break
			}
			msg, retries := defaultDLQError, 0
			if it.errMsg != nil {
				msg = *it.errMsg
			}
			if c != nil {
				retries = c.batchRetry
				c.setCommitted(r.off, now)
				c.lastConsumedAt = now
				if c.ackedCount+1 >= c.batchSize && c.batchSize > 0 {
					c.ackedCount, c.lease = 0, nil
				} else {
					c.ackedCount++
				}
			}
			b.fileDLQ(r.p, it.group, r.off, msg, retries, now)
			res.Success, res.DLQ = true, true
		case "retry":
			if c != nil {
				c.lease = nil
			}
			res.Success = true
			released(true)
		}
		out[i] = res
	}
	return out
}
