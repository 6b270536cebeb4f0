package queentest

import (
	"net/http"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// handleRenew is POST /api/v1/lease/{leaseId}/extend, body {"seconds":N}
// (default 60; an empty body, or one that does not read as that object,
// means 60, as on the 2.x broker). It extends every live lease held by
// the lease id, on every partition a multi-partition pop took: the new
// expiry is max(current, now + seconds), never shorter. An expired or
// released lease cannot be renewed: success:false, renewed:0. Always 200.
func (s *Server) handleRenew(w *recorder, req *request) {
	var body struct {
		Seconds *int32 `json:"seconds"`
	}
	secs := 60
	if decodeJSONLenient(req.body, &body) == nil && body.Seconds != nil {
		secs = max(int(*body.Seconds), 1)
	}
	id := req.params[0]
	b := s.b
	b.mu.Lock()
	now := b.now()
	renewed, earliest := b.renew(id, secs, now)
	b.mu.Unlock()
	// The 2.x reply: the three expiry keys carry the same value (the
	// earliest new expiry among the renewed partitions), or null.
	out := wire.RenewResponse{LeaseID: id, Success: renewed > 0, Renewed: renewed}
	if renewed > 0 {
		e := isoMillis(earliest)
		out.NewExpiresAt, out.ExpiresAt, out.LeaseExpiresAt = &e, &e, &e
	}
	w.json(http.StatusOK, out)
}

// renew extends every live lease with this id. Callers hold mu.
func (b *broker) renew(id string, secs int, now time.Time) (int, time.Time) {
	if id == "" {
		return 0, time.Time{}
	}
	n := 0
	var earliest time.Time
	want := now.Add(time.Duration(secs) * time.Second)
	for _, p := range b.parts {
		for _, c := range p.cursors {
			l := c.liveLease(now)
			if l == nil || l.id != id {
				continue
			}
			if want.After(l.expires) {
				l.expires = want
			}
			n++
			if earliest.IsZero() || l.expires.Before(earliest) {
				earliest = l.expires
			}
		}
	}
	return n, earliest
}
