package queentest

import (
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// The message routes of the 2.x profile (upstream
// server/src/rsm/facade/real/phase2/reads.rs api_dynamic, admin.rs
// api_message_delete). Their partitionId and transactionId segments are
// taken as sent, not unescaped, as the broker splits the raw path.

// partitionByAddress finds the partition a message route names: a decimal
// partition id, or the partition's UUID. Callers hold mu.
func (b *broker) partitionByAddress(id string) *partition {
	if n, err := strconv.ParseUint(strings.TrimPrefix(id, "+"), 10, 63); err == nil {
		return b.parts[int64(n)]
	}
	if u, ok := pgUUID015(id); ok && len(id) == 36 {
		for _, p := range b.parts {
			if p.uuid == u {
				return p
			}
		}
	}
	return nil
}

// handleDeleteMessage is DELETE /api/v1/messages/{partitionId}/{transactionId}
// on the 2.x profile: the dead-letter rows of that message (of every
// consumer group) are deleted, 200 {"success":true,"partitionId",
// "transactionId","deleted":n}; the message itself stays in its partition's
// log. Without such a row, 404 {"success":false,"partitionId",
// "transactionId","error":"Message not found","message"}. partitionId
// echoes the segment as sent.
func (s *Server) handleDeleteMessage(w *recorder, req *request) {
	pidText, txn := req.params[0], req.params[1]
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	if p := b.partitionByAddress(pidText); p != nil {
		for id, r := range b.dlq {
			if r.pid == p.id && r.txn == txn {
				delete(b.dlq, id)
				n++
			}
		}
	}
	if n == 0 {
		w.json(http.StatusNotFound, map[string]any{
			"success": false, "partitionId": pidText, "transactionId": txn, "error": "Message not found",
			"message": "No dead-letter row for this address. Live messages live in immutable segments and cannot be deleted",
		})
		return
	}
	b.bump()
	w.json(http.StatusOK, map[string]any{"success": true, "partitionId": pidText, "transactionId": txn, "deleted": n})
}

// zeroUUID is the nil UUID, the message id the 2.x broker names for a
// replay that stored nothing.
const zeroUUID = "00000000-0000-0000-0000-000000000000"

type messageGroup struct {
	Name           string  `json:"name"`
	Committed      int64   `json:"committed"`
	Consumed       bool    `json:"consumed"`
	LeaseExpiresAt *string `json:"leaseExpiresAt"`
}

type messageMode struct {
	HasQueueMode   bool   `json:"hasQueueMode"`
	BusGroupsCount int    `json:"busGroupsCount"`
	Type           string `json:"type"`
}

type messageView struct {
	ID             string          `json:"id"`
	TransactionID  string          `json:"transactionId"`
	Data           json.RawMessage `json:"data"`
	Payload        json.RawMessage `json:"payload"`
	TraceID        *string         `json:"traceId"`
	ProducerSub    *string         `json:"producerSub"`
	CreatedAt      string          `json:"createdAt"`
	PartitionID    string          `json:"partitionId"`
	Partition      string          `json:"partition"`
	Queue          string          `json:"queue"`
	QueuePath      string          `json:"queuePath"`
	Namespace      *string         `json:"namespace"`
	Task           *string         `json:"task"`
	Status         string          `json:"status"`
	ErrorMessage   *string         `json:"errorMessage"`
	RetryCount     int             `json:"retryCount"`
	IsEncrypted    bool            `json:"isEncrypted"`
	QueueConfig    optionsJSON     `json:"queueConfig"`
	Mode           messageMode     `json:"mode"`
	ConsumerGroups []messageGroup  `json:"consumerGroups"`
}

// handleGetMessage is GET /api/v1/messages/{partitionId}/{transactionId} on
// the 2.x profile (phase2/reads.rs api_message): the first message the
// partition stores under the transactionId, with partitionId the
// partition's UUID, its status (dead_letter while a dead-letter row holds
// it; completed once every consumer group's cursor passed it, or, with no
// group, the queue-mode cursor; processing while a cursor of the partition
// holds a live lease; else pending), the queue's options as queueConfig,
// and one entry per cursor row of the partition. 404 {"error":"Message not
// found"} otherwise.
func (s *Server) handleGetMessage(w *recorder, req *request) {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.partitionByAddress(req.params[0])
	var off int64 = -1
	if p != nil {
		if o, ok := p.firstOffset(req.params[1]); ok {
			off = o
		}
	}
	if off < 0 {
		w.json(http.StatusNotFound, map[string]string{"error": "Message not found"})
		return
	}
	now := b.now()
	m, q := p.msgs[off], p.q
	var dead *dlqRow
	for _, r := range b.dlq {
		if r.pid == p.id && r.txn == m.txn && (dead == nil || r.seq < dead.seq) {
			dead = r
		}
	}
	names := make([]string, 0, len(p.cursors))
	for g, c := range p.cursors {
		if c.row {
			names = append(names, g)
		}
	}
	sort.Strings(names)
	groups := []messageGroup{}
	bus, passed, queueModePassed, hasQueueMode, live := 0, 0, false, false, false
	for _, g := range names {
		c := p.cursors[g]
		mg := messageGroup{Name: g, Committed: c.committed, Consumed: off <= c.committed}
		if c.lease != nil {
			t := isoMicros(c.lease.expires)
			mg.LeaseExpiresAt = &t
		}
		groups = append(groups, mg)
		if g == queueModeGroup {
			hasQueueMode, queueModePassed = true, mg.Consumed
		} else {
			bus++
			if mg.Consumed {
				passed++
			}
		}
		live = live || c.liveLease(now) != nil
	}
	status := "pending"
	switch {
	case dead != nil:
		status = "dead_letter"
	case bus > 0 && passed == bus, bus == 0 && queueModePassed:
		status = "completed"
	case live:
		status = "processing"
	}
	v := messageView{
		ID: m.id, TransactionID: m.txn, Data: m.payload, Payload: m.payload, TraceID: m.traceID,
		CreatedAt: isoMicros(m.createdAt), PartitionID: p.uuid, Partition: p.name, Queue: q.name,
		QueuePath: q.name + "/" + p.name, Status: status, QueueConfig: q.cfg.options(),
		Mode:           messageMode{HasQueueMode: hasQueueMode, BusGroupsCount: bus, Type: modeType015(hasQueueMode, bus)},
		ConsumerGroups: groups,
	}
	if len(v.Data) == 0 {
		v.Data, v.Payload = json.RawMessage("null"), json.RawMessage("null")
	}
	if q.namespace != "" {
		ns := q.namespace
		v.Namespace = &ns
	}
	if q.task != "" {
		tk := q.task
		v.Task = &tk
	}
	if dead != nil {
		e := dead.errMsg
		v.ErrorMessage, v.RetryCount = &e, dead.retryCount
	}
	w.json(http.StatusOK, v)
}
