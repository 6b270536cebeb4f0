package queentest

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
)

// The message view of the 0.15.1 profile: GET
// /api/v1/messages/{partitionId}/{transactionId}
// (server/src/routes/messages.cpp; get_message_v1 in
// lib/schema/procedures/010_messages.sql).

// pgUUID015 reads s as PostgreSQL's uuid input does (any case, optional
// braces, a hyphen allowed after any group of four digits) and returns it
// in the canonical lower-case form; false when PostgreSQL refuses it.
func pgUUID015(s string) (string, bool) {
	t := s
	if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
		t = t[1 : len(t)-1]
	}
	var hex []byte
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
			hex = append(hex, c)
		case c >= 'A' && c <= 'F':
			hex = append(hex, c+'a'-'A')
		case c == '-' && len(hex) > 0 && len(hex)%4 == 0 && len(hex) < 32 && i+1 < len(t) && t[i+1] != '-':
		default:
			return "", false
		}
	}
	if len(hex) != 32 {
		return "", false
	}
	h := string(hex)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], true
}

type messageView015 struct {
	ConsumerGroups []messageGroup015 `json:"consumerGroups"`
	CreatedAt      string            `json:"createdAt"`
	ErrorMessage   *string           `json:"errorMessage"`
	ID             string            `json:"id"`
	IsEncrypted    bool              `json:"isEncrypted"`
	LeaseExpiresAt *string           `json:"leaseExpiresAt"`
	Mode           messageMode015    `json:"mode"`
	Namespace      string            `json:"namespace"`
	Partition      string            `json:"partition"`
	PartitionID    string            `json:"partitionId"`
	Payload        json.RawMessage   `json:"payload"`
	ProducerSub    *string           `json:"producerSub"`
	Queue          string            `json:"queue"`
	QueueConfig    messageQueueCfg   `json:"queueConfig"`
	QueuePath      string            `json:"queuePath"`
	RetryCount     *int              `json:"retryCount"`
	Status         string            `json:"status"`
	Task           string            `json:"task"`
	TraceID        *string           `json:"traceId"`
	TransactionID  string            `json:"transactionId"`
}

type messageGroup015 struct {
	Consumed       bool    `json:"consumed"`
	LeaseExpiresAt *string `json:"leaseExpiresAt"`
	Name           string  `json:"name"`
}

type messageMode015 struct {
	BusGroupsCount   int    `json:"busGroupsCount"`
	ConsumedByGroups int    `json:"consumedByGroups"`
	HasQueueMode     bool   `json:"hasQueueMode"`
	Type             string `json:"type"`
}

type messageQueueCfg struct {
	LeaseTime  int `json:"leaseTime"`
	Priority   int `json:"priority"`
	RetryDelay int `json:"retryDelay"`
	RetryLimit int `json:"retryLimit"`
	TTL        int `json:"ttl"`
}

// modeType015 is get_message_v1's mode.type.
func modeType015(queueMode bool, bus int) string {
	switch {
	case !queueMode && bus > 0:
		return "bus"
	case queueMode && bus == 0:
		return "queue"
	case queueMode && bus > 0:
		return "hybrid"
	}
	return "none"
}

// handleGetMessage015 is GET /api/v1/messages/{partitionId}/{transactionId}
// on the 0.15.1 profile, always HTTP 200 (the route's error status never
// reaches the wire). The answer is the message ({id, transactionId,
// partitionId, queuePath "queue/partition", queue, partition, namespace,
// task, payload, isEncrypted false, traceId, producerSub null, createdAt to
// the millisecond}), its status (dead_letter when a dead-letter row holds
// it; on a partition with consumer groups and no queue-mode consumer,
// completed once every group consumed it, else pending; otherwise
// completed once the queue-mode cursor passed it, processing while a
// queue-mode lease is live, else pending), errorMessage and retryCount of
// its dead-letter row (null when none), leaseExpiresAt of the queue-mode
// lease, queueConfig {leaseTime (s), retryLimit, retryDelay (ms), ttl,
// priority}, mode {hasQueueMode, busGroupsCount, consumedByGroups, type
// none/queue/bus/hybrid} and consumerGroups (one {name, consumed,
// leaseExpiresAt} per group with a cursor on the partition, queue mode as
// "__QUEUE_MODE__"). A message the partition does not hold (or an unknown
// partition) answers {"error":"Message not found"}; a partitionId that is
// no UUID, PostgreSQL's error as {"success":false,"error"}.
func (s *Server) handleGetMessage015(w *recorder, req *request) {
	pidText, txn := req.params[0], req.params[1]
	pid, ok := pgUUID015(pidText)
	if !ok {
		w.dbError("invalid input syntax for type uuid: \"" + pidText + "\"\nCONTEXT:  unnamed portal parameter $1 = '...'")
		return
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.partsByUUID[pid]
	var off int64 = -1
	if p != nil {
		if o, ok := p.firstOffset(txn); ok {
			off = o
		}
	}
	if off < 0 {
		w.json(http.StatusOK, map[string]string{"error": "Message not found"})
		return
	}
	m := p.msgs[off]
	q := p.q
	now := b.now()

	var qc *cursor
	bus, consumedBy := 0, 0
	var groups []messageGroup015
	for name, c := range p.cursors {
		consumed := c.committed >= off
		g := messageGroup015{Name: name, Consumed: consumed}
		if c.lease != nil {
			t := isoMillis015(c.lease.expires)
			g.LeaseExpiresAt = &t
		}
		groups = append(groups, g)
		if name == queueModeGroup {
			qc = c
			continue
		}
		bus++
		if consumed {
			consumedBy++
		}
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].Name < groups[j].Name })
	if groups == nil {
		groups = []messageGroup015{}
	}

	var dead *dlqRow
	for _, r := range b.dlq {
		if r.pid == p.id && r.messageID == m.id && (dead == nil || r.seq < dead.seq) {
			dead = r
		}
	}
	status := "pending"
	switch {
	case dead != nil:
		status = "dead_letter"
	case qc == nil && bus > 0:
		if consumedBy == bus {
			status = "completed"
		}
	case qc != nil && qc.committed >= off:
		status = "completed"
	case qc != nil && qc.liveLease(now) != nil:
		status = "processing"
	}

	v := messageView015{
		ConsumerGroups: groups,
		CreatedAt:      isoMillis015(m.createdAt),
		ID:             m.id,
		Mode: messageMode015{BusGroupsCount: bus, ConsumedByGroups: consumedBy, HasQueueMode: qc != nil,
			Type: modeType015(qc != nil, bus)},
		Namespace:   q.namespace,
		Partition:   p.name,
		PartitionID: p.uuid,
		Payload:     m.payload,
		Queue:       q.name,
		QueueConfig: messageQueueCfg{LeaseTime: q.cfg.LeaseTime, Priority: q.cfg.Priority, RetryDelay: q.cfg.RetryDelay,
			RetryLimit: q.cfg.RetryLimit, TTL: q.cfg.TTL},
		QueuePath:     q.name + "/" + p.name,
		Status:        status,
		Task:          q.task,
		TraceID:       m.traceID,
		TransactionID: m.txn,
	}
	if len(v.Payload) == 0 {
		v.Payload = json.RawMessage("null")
	}
	if dead != nil {
		e, n := dead.errMsg, dead.retryCount
		v.ErrorMessage, v.RetryCount = &e, &n
	}
	if qc != nil && qc.lease != nil {
		t := isoMillis015(qc.lease.expires)
		v.LeaseExpiresAt = &t
	}
	w.json(http.StatusOK, v)
}

// handleDeleteMessage015 is DELETE /api/v1/messages/{partitionId}/{transactionId}
// on the 0.15.1 profile (server/src/routes/messages.cpp; delete_message_v1
// in lib/schema/procedures/010_messages.sql), always HTTP 200: the message
// is deleted from its partition, its dead-letter rows with it (the foreign
// key cascades), and the answer is {"success":true,"partitionId",
// "transactionId","message":"Message deleted successfully"}, or
// success:false with "Message not found" when the partition does not hold
// it. A partitionId that is no UUID is PostgreSQL's error, as for the view.
func (s *Server) handleDeleteMessage015(w *recorder, req *request) {
	pidText, txn := req.params[0], req.params[1]
	pid, ok := pgUUID015(pidText)
	if !ok {
		w.dbError("invalid input syntax for type uuid: \"" + pidText + "\"\nCONTEXT:  unnamed portal parameter $1 = '...'")
		return
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	deleted := false
	if p := b.partsByUUID[pid]; p != nil {
		if off, ok := p.firstOffset(txn); ok {
			b.removeMessage015(p, off)
			b.bump()
			deleted = true
		}
	}
	msg := "Message not found"
	if deleted {
		msg = "Message deleted successfully"
	}
	w.json(http.StatusOK, map[string]any{"success": deleted, "partitionId": pid, "transactionId": txn, "message": msg})
}
