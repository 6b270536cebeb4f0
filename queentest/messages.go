package queentest

import (
	"net/http"
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
