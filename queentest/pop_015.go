package queentest

import (
	"context"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// The two pop routes of the 0.15.1 profile (server/src/routes/pop.cpp and
// the stored procedure pop_unified_batch_v4 of 002d_pop_unified_v4.sql).

// Pop defaults of 0.15.1 (server/include/queen/config.hpp); the default
// batch is the generation's (wire.Generation.DefaultPopBatch).
const defaultPopTimeout015 = 30 * time.Second

// pop015Params is a 0.15.1 pop query, read as the broker's query helpers
// read it: a number that does not parse is the default, a boolean is true
// only for "true" or "1", and an empty value is the default.
type pop015Params struct {
	group    string // queueModeGroup when absent, as sent (even "") otherwise
	wait     bool
	timeout  time.Duration
	batch    int // as sent; the wildcard route takes at least one message
	maxParts int
	autoAck  bool
	subMode  string // "" = the broker default, which is all
	subFrom  string
}

func parsePop015(q url.Values) pop015Params {
	intOf := func(k string, def int) int {
		v := q.Get(k)
		if v == "" {
			return def
		}
		// std::stoi: optional sign and the leading digits; nothing else.
		v = strings.TrimLeft(v, " \t")
		end := 0
		if end < len(v) && (v[end] == '-' || v[end] == '+') {
			end++
		}
		for end < len(v) && v[end] >= '0' && v[end] <= '9' {
			end++
		}
		n, err := strconv.Atoi(v[:end])
		if err != nil {
			return def
		}
		return n
	}
	boolOf := func(k string) bool {
		v := q.Get(k)
		return v == "true" || v == "1"
	}
	group := queueModeGroup
	if v, ok := q["consumerGroup"]; ok {
		group = v[0] // present, even empty: that is the group
	}
	return pop015Params{
		group:    group,
		wait:     boolOf("wait"),
		timeout:  time.Duration(intOf("timeout", int(defaultPopTimeout015/time.Millisecond))) * time.Millisecond,
		batch:    intOf("batch", wire.Gen015().DefaultPopBatch),
		maxParts: max(intOf("partitions", 1), 1),
		autoAck:  boolOf("autoAck"),
		subMode:  q.Get("subscriptionMode"),
		subFrom:  q.Get("subscriptionFrom"),
	}
}

// A 0.15.1 pop that claimed at least one partition answers a
// wire.PopResponse without conflation or autopilot fields, whose messages
// have no deliveryAttempt and no offset, and a UUID partitionId.

// emptyPop015 is the answer of a pop that claimed nothing: code is
// no_available_partition, partition_not_found or lease_held.
func emptyPop015(code string) map[string]any {
	return map[string]any{"error": code, "messages": []any{}, "success": false}
}

// dbErrorBody is the body of a 0.15.1 database error (see dbError).
func dbErrorBody(msg string) map[string]any {
	return map[string]any{"success": false, "error": "ERROR:  " + msg + "\n"}
}

// handlePop015 is GET /api/v1/pop/queue/{queue} and
// GET /api/v1/pop/queue/{queue}/partition/{partition} on the 0.15.1
// profile. Every answer is 200. With wait=true, an answer without messages
// (whatever it says) is not sent: the pop runs again on every change until
// it has messages or the timeout passes, and then answers success:true,
// messages:[], leaseId:null.
func (s *Server) handlePop015(w *recorder, req *request) {
	p := parsePop015(req.query)
	queue, part, pinned := req.params[0], "", len(req.params) > 1
	if pinned {
		part = req.params[1]
	}
	b := s.b
	leaseID := newUUID()
	deadline := time.Now().Add(p.timeout)
	var wait recheck015
	for {
		b.mu.Lock()
		body, got := b.pop015(queue, part, pinned, p, leaseID, b.now())
		pushed, seen := b.pushed, b.pushes[queue]
		b.mu.Unlock()
		if got || !p.wait {
			w.json(http.StatusOK, body)
			return
		}
		if !s.park015(req.ctx, &wait, queue, pushed, seen, deadline) {
			w.json(http.StatusOK, map[string]any{
				"success": true, "queue": queue, "partition": part, "partitionId": nil,
				"leaseId": nil, "consumerGroup": p.group, "messages": []any{},
			})
			return
		}
	}
}

// The 0.15.1 broker looks again for a parked (waiting) pop on a schedule
// (libqueen's _set_next_backoff_time, with the server's defaults
// POP_WAIT_INITIAL_INTERVAL_MS 100, POP_WAIT_BACKOFF_THRESHOLD 3,
// POP_WAIT_BACKOFF_MULTIPLIER 2, POP_WAIT_MAX_INTERVAL_MS 1000): after the
// n-th look that found nothing, the next comes 100 ms later for n up to 3,
// then 100 ms × n × 2, at most 1 s (100, 100, 100, 800, 1000, ... ms). A
// push that stores messages in the pop's queue makes it look at once and
// starts the schedule again. An ack, a nack or an expired lease wakes no
// one: a pop parked while the partitions were leased sees them free only
// at its next look.
const (
	recheckFirst015     = 100 * time.Millisecond
	recheckThreshold015 = 3
	recheckFactor015    = 2
	recheckMax015       = time.Second
)

// recheck015 is the schedule of one parked pop: looks that found nothing
// since it began (or since the last push to its queue).
type recheck015 struct{ empty int }

// next is the wait before the next look, after one more that found
// nothing.
func (r *recheck015) next() time.Duration {
	r.empty++
	if r.empty <= recheckThreshold015 {
		return recheckFirst015
	}
	return min(recheckFirst015*time.Duration(r.empty*recheckFactor015), recheckMax015)
}

// park015 waits for the next look of a parked 0.15.1 pop: its turn in the
// schedule, or a push to queue (pushes seen of them so far; pushed is the
// broker's signal). It reports whether to look again (false: the deadline
// passed, the request or the server ended).
func (s *Server) park015(ctx context.Context, r *recheck015, queue string, pushed <-chan struct{}, seen uint64, deadline time.Time) bool {
	d := min(r.next(), time.Until(deadline))
	if d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		woken, again := s.sleep(ctx, pushed, t, deadline)
		if !woken {
			return again
		}
		s.b.mu.Lock()
		n := s.b.pushes[queue]
		pushed = s.b.pushed
		s.b.mu.Unlock()
		if n != seen { // not only pushes to other queues
			r.empty = 0
			return true
		}
	}
}

// windowHeld015 reports whether the queue's windowBuffer holds p from
// 0.15.1 pops at now: its newest message (partition_lookup's
// last_message_created_at, lastWrite here) was created less than
// windowBuffer seconds ago. The pinned route answers the hold at once,
// before it reads the group, the batch or a lease; the wildcard route
// passes the partition by.
func (p *partition) windowHeld015(now time.Time) bool {
	w := p.q.cfg.WindowBuffer
	return w > 0 && !p.lastWrite.IsZero() && now.Before(p.lastWrite.Add(time.Duration(w)*time.Second))
}

// pop015 is one run of pop_unified_batch_v4. It reports the body and
// whether it holds messages. Callers hold mu. (A parked pop looks again on
// the broker's schedule, park015: no wake-up time is derived from leases
// or delayed messages.)
func (b *broker) pop015(queue, partName string, pinned bool, p pop015Params, leaseID string, now time.Time) (any, bool) {
	q := b.queues[queue]
	if pinned {
		var part *partition
		if q != nil {
			part = q.byName[partName]
		}
		switch {
		case part == nil:
			return emptyPop015("partition_not_found"), false
		case part.windowHeld015(now):
			return map[string]any{
				"success": true, "queue": queue, "partition": partName, "partitionId": part.uuid,
				"leaseId": "", "consumerGroup": p.group, "messages": []any{}, "windowBufferActive": true,
			}, false
		case tooLong015(p.group):
			return dbErrorBody(errTooLong015), false
		case p.batch < 0:
			return dbErrorBody("LIMIT must not be negative"), false
		}
		c := part.cursors[p.group]
		if c == nil {
			c = &cursor{committed: -1, attemptOff: -1}
			part.cursors[p.group] = c
		}
		if c.liveLease(now) != nil {
			return emptyPop015("lease_held"), false
		}
		msgs, changed := b.claim015(part, c, p, leaseID, p.batch, partName, now)
		if changed {
			b.bump()
		}
		return b.popBody015(p, leaseID, part, msgs, 1), len(msgs) > 0
	}

	// Wildcard. A name longer than the column fails the broker's bookkeeping
	// insert (consumer_watermarks) before anything else is seen.
	if tooLong015(queue) || tooLong015(p.group) {
		return dbErrorBody(errTooLong015), false
	}
	if q == nil {
		return emptyPop015("no_available_partition"), false
	}
	// The candidates: partitions with messages, not held by the queue's
	// windowBuffer, no live lease of the group, and a message past its
	// cursor (a NULL cursor always qualifies).
	var cands []candidate
	for _, part := range q.parts {
		if len(part.msgs) == 0 || part.windowHeld015(now) {
			continue
		}
		from := int64(0)
		if c := part.cursors[p.group]; c != nil {
			if c.liveLease(now) != nil {
				continue
			}
			if c.committed >= part.lastOffset() {
				continue
			}
			from = c.committed + 1
		}
		cands = append(cands, candidate{p: part, next: part.msgs[from]})
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, c := cands[i], cands[j]
		if !a.next.createdAt.Equal(c.next.createdAt) {
			return a.next.createdAt.Before(c.next.createdAt)
		}
		return a.p.id < c.p.id
	})
	remaining, claimed := max(p.batch, 1), 0
	var first *partition
	var all []wire.PopMessage
	changed := false
	for _, cd := range cands {
		if remaining <= 0 || claimed >= p.maxParts {
			break
		}
		c := cd.p.cursors[p.group]
		if c == nil {
			c = &cursor{committed: -1, attemptOff: -1}
			cd.p.cursors[p.group] = c
		}
		msgs, ch := b.claim015(cd.p, c, p, leaseID, remaining, "", now)
		changed = changed || ch
		if first == nil {
			first = cd.p
		}
		all = append(all, msgs...)
		remaining -= len(msgs)
		claimed++
	}
	if claimed == 0 {
		return emptyPop015("no_available_partition"), false
	}
	if changed {
		b.bump() // a claim that found nothing and moved nothing wakes no one
	}
	return b.popBody015(p, leaseID, first, all, claimed), len(all) > 0
}

func (b *broker) popBody015(p pop015Params, leaseID string, first *partition, msgs []wire.PopMessage, claimed int) wire.PopResponse {
	if p.autoAck {
		leaseID = ""
	}
	if msgs == nil {
		msgs = []wire.PopMessage{}
	}
	return wire.PopResponse{
		Success: true, Queue: first.q.name, Partition: first.name, PartitionID: first.uuid,
		LeaseID: leaseID, ConsumerGroup: p.group, Messages: msgs, PartitionsClaimed: claimed,
	}
}

// claim015 leases part for the pop's group and reads up to limit messages
// past its cursor, as the claim of pop_unified_batch_v4 does:
//
//   - The lease: leaseTime of the queue (60 s when 0), batch size = the
//     request's batch, acked count 0, the retry budget kept.
//   - A NULL cursor of a named group starts at its subscription row (the
//     partition's own, else the queue's): messages created at or after its
//     time. Without one, subscriptionFrom (a timestamp) or
//     subscriptionMode=new / subscriptionFrom=now write one (dated by the
//     timestamp, or now) and start there; the first row of a group on a
//     queue also creates the group's (NULL) cursors on every partition that
//     has messages. Otherwise a NULL cursor reads from the start.
//   - No message: the lease is dropped, and a cursor that started at a
//     subscription time moves to the partition's last message created at or
//     before that time: the backlog is skipped for good. Commit on delivery
//     moves the cursor over what it hands out and drops the lease.
//
// subPart is the partition name a written subscription row carries ("" on
// the wildcard route). Callers hold mu.
//
// It also reports whether it changed anything a parked pop could care
// about (messages handed out, a cursor moved, a subscription written).
func (b *broker) claim015(part *partition, c *cursor, p pop015Params, leaseID string, limit int, subPart string, now time.Time) ([]wire.PopMessage, bool) {
	secs := part.q.cfg.LeaseTime
	if secs == 0 {
		secs = 60
	}
	c.lease = &lease{id: leaseID, acquired: now, expires: now.Add(time.Duration(secs) * time.Second), end: -1}
	c.batchSize, c.ackedCount = p.batch, 0

	changed := false
	var since *time.Time
	if c.null015() && p.group != queueModeGroup {
		if m := b.subOf(part.q.name, p.group, part.name); m != nil {
			ts := m.subTS
			since = &ts
		} else if p.subFrom != "" && p.subFrom != "now" {
			if ts, ok := parseTime(p.subFrom); ok {
				since = &ts
				changed = b.addSub015(part.q, p.group, subPart, "timestamp", ts, now)
			}
		} else if p.subFrom == "now" || p.subMode == "new" {
			t := now
			since = &t
			changed = b.addSub015(part.q, p.group, subPart, "new", now, now)
		}
	}

	var offs []int64
	for o := c.committed + 1; o <= part.lastOffset() && len(offs) < limit; o++ {
		m := part.msgs[o]
		if since != nil && m.createdAt.Before(*since) {
			continue
		}
		if !part.visible(m, now) {
			break
		}
		offs = append(offs, o)
	}
	n := len(offs)
	changed = changed || n > 0
	switch {
	case p.autoAck && n > 0:
		c.setCommitted(offs[n-1], now)
		c.lease = nil
		c.batchSize, c.ackedCount = 0, 0
	case n == 0:
		if since != nil {
			if o := part.lastAtOrBefore(*since); o >= 0 {
				c.setCommitted(o, now)
				c.lastConsumedAt = now
				changed = true
			}
		}
		c.lease = nil
	default:
		c.lease.end, c.lease.delivered = offs[n-1], offs
		if n != p.batch {
			c.batchSize = n
		}
	}

	wireLease := leaseID
	if p.autoAck {
		wireLease = ""
	}
	out := make([]wire.PopMessage, n)
	for i, off := range offs {
		m := part.msgs[off]
		out[i] = wire.PopMessage{
			ID: m.id, TransactionID: m.txn, TraceID: nullString(m.traceID), Data: wire.Payload{Raw: m.payload},
			CreatedAt: isoMicros(m.createdAt), PartitionID: part.uuid, Partition: part.name,
			LeaseID: wireLease, ConsumerGroup: p.group,
		}
	}
	return out, changed
}

// subOf is the 0.15.1 subscription row that starts group's NULL cursor on
// partition part of queue: the partition's own, else the queue's. Callers
// hold mu.
func (b *broker) subOf(queue, group, part string) *groupMeta {
	if m := b.subs[subKey{queue, group, part}]; m != nil && part != "" {
		return m
	}
	return b.subs[subKey{queue, group, ""}]
}

// addSub015 writes a subscription row unless one exists under the same key
// (it reports whether it wrote one); the first row written also creates the
// group's cursors (NULL) on every partition of q that has messages. Callers
// hold mu.
func (b *broker) addSub015(q *queue, group, part, mode string, ts, now time.Time) bool {
	k := subKey{q.name, group, part}
	if b.subs[k] != nil {
		return false
	}
	b.subs[k] = &groupMeta{mode: mode, subTS: ts, registeredAt: now}
	for _, p := range q.parts {
		if len(p.msgs) > 0 && p.cursors[group] == nil {
			p.cursors[group] = &cursor{committed: -1, attemptOff: -1, lastConsumedAt: now}
		}
	}
	return true
}

// lastAtOrBefore is the offset of p's newest message created at or before
// ts (the latest created, the latest stored among equals), or -1.
func (p *partition) lastAtOrBefore(ts time.Time) int64 {
	best := int64(-1)
	for _, m := range p.msgs {
		if m.createdAt.After(ts) {
			continue
		}
		if best < 0 || !m.createdAt.Before(p.msgs[best].createdAt) {
			best = m.offset
		}
	}
	return best
}
