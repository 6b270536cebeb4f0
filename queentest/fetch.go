package queentest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// Fetch limits of the 2.x broker (phase2/reads.rs api_fetch).
const (
	fetchMaxEntries  = 1024
	fetchMaxRecords  = 10000
	fetchDefaultMax  = 1 << 20
	fetchCeilingMax  = 8 << 20
	fetchMaxWaitCeil = 30 * time.Second
)

type fetchEntryIn struct {
	Queue     *string         `json:"queue"`
	Partition json.RawMessage `json:"partition"`
	Offset    *int64          `json:"offset"`
	MaxBytes  *int64          `json:"maxBytes"`
}

type fetchBody struct {
	Entries   []fetchEntryIn `json:"entries"`
	MaxWaitMs *int64         `json:"maxWaitMs"`
	MinBytes  *int64         `json:"minBytes"`
}

// fetchPartition is the partition name an entry addresses: a string, a
// number in decimal, or Default.
func fetchPartition(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&n) == nil {
		return n.String()
	}
	return wire.DefaultPartition
}

// handleFetch is POST /api/v1/fetch: read partitions by offset, with no
// consumer group, lease or ack, so cursors never move. Each entry answers
// its records from the offset (at most maxBytes of payload, the first record
// always; at most 10 000), the partition's highWatermark (next offset to be
// written) and logStartOffset, or an error: UNKNOWN_TOPIC_OR_PARTITION for an
// unknown queue, OFFSET_OUT_OF_RANGE past the high watermark. An existing
// queue's unknown partition answers empty, without error. With maxWaitMs
// (capped at 30 s) the answer waits until minBytes (default 1) of payload
// are there, or an entry errs.
func (s *Server) handleFetch(w *recorder, req *request) {
	var body fetchBody
	if !w.readJSON(req.body, &body, "") {
		return
	}
	if len(body.Entries) > fetchMaxEntries {
		w.json(http.StatusBadRequest, map[string]string{"error": "too many entries", "code": "bad_request"})
		return
	}
	for _, e := range body.Entries {
		if e.Queue == nil || e.Offset == nil {
			w.error(http.StatusBadRequest, "bad_body", "every entry needs queue and offset")
			return
		}
		if *e.Offset < 0 {
			w.json(http.StatusBadRequest, map[string]string{"error": "offset must be non-negative", "code": "bad_request"})
			return
		}
	}
	maxWait := time.Duration(0)
	if body.MaxWaitMs != nil && *body.MaxWaitMs > 0 {
		maxWait = min(time.Duration(*body.MaxWaitMs)*time.Millisecond, fetchMaxWaitCeil)
	}
	minBytes := int64(1)
	if body.MinBytes != nil {
		minBytes = max(*body.MinBytes, 0)
	}
	deadline := time.Now().Add(maxWait)
	for {
		s.b.mu.Lock()
		out, n, failed := s.b.fetch(body.Entries)
		ch := s.b.changed
		s.b.mu.Unlock()
		if maxWait == 0 || minBytes == 0 || failed || n >= minBytes ||
			!s.park(req.ctx, ch, deadline, time.Time{}) {
			w.json(http.StatusOK, out)
			return
		}
	}
}

// fetch reads every entry; it returns the answer, the payload bytes read and
// whether an entry erred. Callers hold mu.
func (b *broker) fetch(entries []fetchEntryIn) (wire.FetchResponse, int64, bool) {
	out := wire.FetchResponse{Entries: make([]wire.FetchEntryResult, 0, len(entries))}
	var total int64
	failed := false
	for _, e := range entries {
		part := fetchPartition(e.Partition)
		r := wire.FetchEntryResult{Queue: *e.Queue, Partition: part, Records: []wire.FetchRecord{}}
		q := b.queues[*e.Queue]
		var p *partition
		if q != nil {
			p = q.byName[part]
		}
		switch {
		case q == nil:
			r.Error = wire.FetchUnknownPartition
			failed = true
		case p == nil:
		default:
			r.HighWatermark = int64(len(p.msgs))
			if *e.Offset > r.HighWatermark {
				r.Error = wire.FetchOffsetOutOfRange
				failed = true
				break
			}
			maxBytes := int64(fetchDefaultMax)
			if e.MaxBytes != nil {
				maxBytes = min(max(*e.MaxBytes, 1), fetchCeilingMax)
			}
			var used int64
			for off := *e.Offset; off < r.HighWatermark && len(r.Records) < fetchMaxRecords; off++ {
				m := p.msgs[off]
				weight := max(int64(len(m.payload)), 1)
				if len(r.Records) > 0 && used+weight > maxBytes {
					break
				}
				used += weight
				payload := m.payload
				if len(payload) == 0 {
					payload = json.RawMessage("null")
				}
				r.Records = append(r.Records, wire.FetchRecord{Offset: off, TransactionID: m.txn, Payload: payload, TS: isoMicros(m.createdAt)})
			}
			total += used
		}
		out.Entries = append(out.Entries, r)
	}
	return out, total, failed
}
