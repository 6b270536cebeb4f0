package queentest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// Pop defaults and bounds of the 2.x broker (handlers/data.rs, handlers/raft.rs).
// The default batch is the generation's (wire.Generation.DefaultPopBatch).
const (
	defaultPopTimeout = 30 * time.Second
	maxPopTimeout     = 60 * time.Second
	maxPopPartitions  = 64
	discoveryLease    = 60 // seconds: a discovery pop's lease unless leaseSeconds is sent
)

// popParams is the query of the three pop routes.
type popParams struct {
	batch      *int
	partitions *int
	autoAck    bool
	wait       bool
	timeout    time.Duration
	leaseSec   int
	group      string // "" = queue mode
	subMode    string
	// subModeSent: subscriptionMode was in the query (even empty, which
	// the 2.x broker reads as `all`).
	subModeSent bool
	subFrom     string
	conflation  *bool
	autopilot   bool
	namespace   string
	task        string
}

// parsePopParams reads the pop query like the broker's typed query
// extractor: integers must be integers, booleans exactly true or false.
// commitOnDelivery and autoAck are one switch (handlers/data.rs
// commits_on_delivery).
// The long-poll timeout defaults to 30 s and is clamped to 1 ms..60 s.
func parsePopParams(q url.Values) (popParams, error) {
	p := popParams{timeout: defaultPopTimeout}
	intOf := func(k string) (*int, error) {
		v, ok := q[k]
		if !ok {
			return nil, nil
		}
		n, err := strconv.Atoi(v[0])
		if err != nil {
			return nil, fmt.Errorf("%s: invalid digit found in string", k)
		}
		return &n, nil
	}
	boolOf := func(k string) (*bool, error) {
		v, ok := q[k]
		if !ok {
			return nil, nil
		}
		switch v[0] {
		case "true":
			t := true
			return &t, nil
		case "false":
			f := false
			return &f, nil
		}
		return nil, fmt.Errorf("%s: provided string was not `true` or `false`", k)
	}
	var err error
	if p.batch, err = intOf("batch"); err != nil {
		return p, err
	}
	if p.partitions, err = intOf("partitions"); err != nil {
		return p, err
	}
	ls, err := intOf("leaseSeconds")
	if err != nil {
		return p, err
	}
	if ls != nil {
		p.leaseSec = *ls
	}
	to, err := intOf("timeout")
	if err != nil {
		return p, err
	}
	if to != nil {
		if *to < 0 {
			return p, errors.New("timeout: invalid digit found in string")
		}
		p.timeout = min(max(time.Duration(*to)*time.Millisecond, time.Millisecond), maxPopTimeout)
	}
	var cod bool
	for k, dst := range map[string]*bool{"autoAck": &p.autoAck, "commitOnDelivery": &cod, "wait": &p.wait, "autopilot": &p.autopilot} {
		b, err := boolOf(k)
		if err != nil {
			return p, err
		}
		if b != nil {
			*dst = *b
		}
	}
	// commitOnDelivery is the documented name, autoAck its older alias
	// (2.0.2+): either one true commits at delivery.
	p.autoAck = p.autoAck || cod
	if p.conflation, err = boolOf("conflation"); err != nil {
		return p, err
	}
	p.group = q.Get("consumerGroup")
	p.subMode, p.subModeSent = q.Get("subscriptionMode"), q.Has("subscriptionMode")
	p.subFrom = q.Get("subscriptionFrom")
	p.namespace = q.Get("namespace")
	p.task = q.Get("task")
	return p, nil
}

// subscription turns the request's subscription knobs into what a group
// registers with, as the 2.x broker reads them (handlers/data.rs,
// config.rs normalize_subscription_mode, rsm/consume/load.rs
// registration_meta): subscriptionFrom (a time) wins over
// subscriptionMode, and "now" is `new`; an absent mode is the default,
// `new`, and a mode sent is `new` when it spells new ("new", "new-only",
// "new_only", "newonly", any case), else `all` (an empty one included).
func (p popParams) subscription() subscription {
	sub := subscription{mode: "new", conflation: p.conflates()}
	switch strings.ToLower(strings.TrimSpace(p.subMode)) {
	case "new", "new-only", "new_only", "newonly":
	default:
		if p.subModeSent {
			sub.mode = "all"
		}
	}
	if strings.EqualFold(p.subFrom, "now") {
		sub.mode = "new"
	} else if t, ok := parseTime(p.subFrom); ok && p.subFrom != "" {
		sub.mode, sub.ts = "timestamp", t
	}
	return sub
}

// conflates reports whether the pop asks to conflate: conflation=true for a
// named group (queue mode never conflates).
func (p popParams) conflates() bool {
	return p.conflation != nil && *p.conflation && p.group != ""
}

// popReq is one pop, resolved from its route and query.
type popReq struct {
	queue       string // "" on discovery
	partition   string
	pinned      bool
	discover    bool
	namespace   string
	task        string
	group       string
	budget      int
	maxParts    int
	autoParts   bool
	autoBatch   bool
	autoAck     bool
	leaseSec    int
	sub         subscription
	conflateReq *bool
	wait        bool
	timeout     time.Duration
}

// popResult is a pop's 2.x answer (wire.PopResponse) and what the claim
// found.
type popResult struct {
	body    wire.PopResponse
	claimed int
	nextAt  time.Time // when a partition of the scope may become claimable (0: unknown)
}

// popRefusal is the 400 the pop handlers write themselves (2.x
// handlers/data.rs): {success:false, error, messages:[]}, no code.
func popRefusal(w *recorder, msg string) {
	w.json(http.StatusBadRequest, map[string]any{"success": false, "error": msg, "messages": []any{}})
}

// queryRejected answers a pop query the typed extractor cannot read as the
// 2.x broker's axum Query extractor does: a plain-text 400.
func queryRejected(w *recorder, err error) {
	w.body.Reset()
	w.header.Set("Content-Type", "text/plain; charset=utf-8")
	w.status = http.StatusBadRequest
	w.body.WriteString("Failed to deserialize query string: " + err.Error())
}

// conflationRefused answers the two refused conflation combinations
// (handlers/data.rs conflation_refusal).
func conflationRefused(w *recorder, p popParams) bool {
	if p.conflation == nil || !*p.conflation {
		return false
	}
	if p.group == "" {
		popRefusal(w, "conflation requires consumerGroup: queue mode is a shared cursor with no group identity to hang a delivery policy on")
		return true
	}
	if p.autoAck {
		popRefusal(w, "conflation cannot be combined with commitOnDelivery (autoAck): a commit at delivery takes no lease, so a failed handler loses the tail and the at-least-once guarantee conflation exists to provide degrades to at-most-once")
		return true
	}
	return false
}

func (p popParams) base(now time.Time) popReq {
	group := groupOrQueueMode(p.group)
	batch := wire.Gen2x().DefaultPopBatch
	if p.batch != nil {
		batch = max(*p.batch, 1) // the claim takes at least one message
	}
	return popReq{
		group: group, budget: batch, autoAck: p.autoAck, leaseSec: p.leaseSec,
		sub: p.subscription(), conflateReq: p.conflation, wait: p.wait, timeout: p.timeout,
		maxParts: 1,
	}
}

// width is the partition count of a wildcard or discovery pop: partitions,
// default 1, clamped 1..64; a conflating pop defaults to batch instead.
func (p popParams) width(conflate bool, batch int) int {
	w := 1
	switch {
	case p.partitions != nil:
		w = *p.partitions
	case conflate:
		w = batch
	}
	return min(max(w, 1), maxPopPartitions)
}

// handlePopQueue is GET /api/v1/pop/queue/{queue}: any partition of the
// queue, up to `partitions` of them with `batch` as the budget of the whole
// pop, with autopilot.
func (s *Server) handlePopQueue(w *recorder, req *request) {
	p, err := parsePopParams(req.query)
	if err != nil {
		queryRejected(w, err)
		return
	}
	if conflationRefused(w, p) || nameTooLong(w, req.params[0], p.group, "") {
		return
	}
	pr := p.base(s.b.now())
	pr.queue = req.params[0]
	conflate := p.conflates()
	pr.maxParts = p.width(conflate, pr.budget)
	if p.autopilot && !conflate {
		pr.autoParts = p.partitions == nil
		pr.autoBatch = p.batch == nil
	}
	s.runPop(w, req.ctx, pr)
}

// handlePopPartition is GET /api/v1/pop/queue/{queue}/partition/{partition}:
// one named partition; `partitions` and autopilot do not apply.
func (s *Server) handlePopPartition(w *recorder, req *request) {
	p, err := parsePopParams(req.query)
	if err != nil {
		queryRejected(w, err)
		return
	}
	if conflationRefused(w, p) || nameTooLong(w, req.params[0], p.group, req.params[1]) {
		return
	}
	pr := p.base(s.b.now())
	pr.queue, pr.partition, pr.pinned = req.params[0], req.params[1], true
	s.runPop(w, req.ctx, pr)
}

// handlePopDiscover is GET /api/v1/pop?namespace=&task=: the partitions of
// every queue configured with that namespace and/or task. One of the two is
// required. The 2.x broker does not long-poll this route: an empty answer
// comes at once.
func (s *Server) handlePopDiscover(w *recorder, req *request) {
	p, err := parsePopParams(req.query)
	if err != nil {
		queryRejected(w, err)
		return
	}
	if p.namespace == "" && p.task == "" {
		popRefusal(w, "namespace or task is required")
		return
	}
	if conflationRefused(w, p) || nameTooLong(w, "", p.group, "") {
		return
	}
	pr := p.base(s.b.now())
	pr.discover, pr.namespace, pr.task = true, p.namespace, p.task
	conflate := p.conflates()
	pr.maxParts = p.width(conflate, pr.budget)
	pr.wait = false
	s.runPop(w, req.ctx, pr)
}

// runPop claims, and when asked to wait and nothing is there, parks until
// a change (a push, an ack, a clock move) or the timeout, then answers.
func (s *Server) runPop(w *recorder, ctx context.Context, pr popReq) {
	b := s.b
	leaseID := newUUID()
	deadline := time.Now().Add(pr.timeout)
	var leaveLane func()
	if pr.autoParts || pr.autoBatch {
		b.mu.Lock()
		leaveLane = b.ap.enter(laneKey{pr.queue, pr.group})
		b.mu.Unlock()
		defer func() {
			b.mu.Lock()
			leaveLane()
			b.mu.Unlock()
		}()
	}
	for {
		b.mu.Lock()
		res := b.popOnce(pr, leaseID, b.now())
		ch := b.changed
		if res.claimed > 0 && ctx.Err() != nil && !pr.autoAck {
			// Nobody is left to receive the answer: the claim is given back
			// (lease dropped, cursor unmoved, no retry charged), as the 2.x
			// broker nacks an unanswered claim.
			b.nack(leaseID, res.body.Messages)
			res = popResult{body: res.body}
			res.body.Messages = []wire.PopMessage{}
		}
		b.mu.Unlock()
		if res.claimed > 0 || !pr.wait || !s.park(ctx, ch, deadline, res.nextAt) {
			answerPop(w, res)
			return
		}
	}
}

func answerPop(w *recorder, res popResult) {
	if res.claimed == 0 && res.body.Conflation == nil && res.body.ConflationConflict == nil {
		w.noContent() // 2.x: an empty pop is a bodiless 204
		return
	}
	w.json(http.StatusOK, res.body)
}

// park waits for a state change, the real-time deadline, or, for the wall
// clock, the moment something timed (a lease expiry, a
// delayed message) becomes due. It reports whether to look again.
func (s *Server) park(ctx context.Context, ch <-chan struct{}, deadline, next time.Time) bool {
	d := time.Until(deadline)
	if d <= 0 {
		return false
	}
	if !next.IsZero() {
		switch s.b.clock.(type) {
		case systemClock:
			d = min(d, max(time.Until(next), time.Millisecond))
		case *FakeClock:
			// Advance and Set wake the waiters themselves.
		default:
			d = min(d, 50*time.Millisecond) // a clock that does not tell: look now and then
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	_, again := s.sleep(ctx, ch, t, deadline)
	return again
}

// sleep is the wait of a parked pop: for wake, the timer t, or the end of
// the request or of the server. woken: wake fired; again: look once more
// (woken, or t ran out before the deadline).
func (s *Server) sleep(ctx context.Context, wake <-chan struct{}, t *time.Timer, deadline time.Time) (woken, again bool) {
	select {
	case <-wake:
		return true, true
	case <-t.C:
		return false, time.Now().Before(deadline)
	case <-s.closed:
	case <-ctx.Done():
	}
	return false, false
}

// candidate is a partition a pop may claim now.
type candidate struct {
	p    *partition
	next *message
}

// popOnce is one claim attempt. Callers hold mu.
func (b *broker) popOnce(pr popReq, leaseID string, now time.Time) popResult {
	named := pr.group != queueModeGroup
	res := popResult{body: wire.PopResponse{Success: true, Queue: pr.queue, ConsumerGroup: pr.group, Messages: []wire.PopMessage{}}}

	// The queues in scope. A wildcard pop creates its queue with the
	// default configuration, as the 2.x planner does (create_cfg).
	var queues []*queue
	switch {
	case pr.discover:
		names := make([]string, 0, len(b.queues))
		for n, q := range b.queues {
			if (pr.namespace == "" || q.namespace == pr.namespace) && (pr.task == "" || q.task == pr.task) {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		for _, n := range names {
			queues = append(queues, b.queues[n])
		}
	case pr.pinned:
		if q := b.queues[pr.queue]; q != nil {
			queues = append(queues, q)
		}
	default:
		queues = append(queues, b.queueOf(pr.queue, b.implicitConfig(), now))
	}

	// A named group registers on its first wildcard or discovery pop; its
	// stored policy wins. A pinned pop of an unregistered group registers
	// nothing (2.x rsm/consume/pop.rs pop_pinned): the partition it reads
	// starts where this pop's subscription says, and the claim conflates
	// as this pop asks. Only a conflating pinned pop that finds no cursor
	// row on its partition (nothing delivered there yet) registers the
	// group (and starts all its partitions).
	conflate := map[string]bool{}
	if named {
		for _, q := range queues {
			n := q.name
			m := b.groups[groupKey{n, pr.group}]
			if m == nil && pr.pinned {
				p := q.byName[pr.partition]
				if !pr.sub.conflation || p == nil || (p.cursors[pr.group] != nil && p.cursors[pr.group].row) {
					if p != nil && p.cursors[pr.group] == nil {
						p.cursors[pr.group] = &cursor{committed: p.seedIntent(pr.sub), attemptOff: -1}
					}
					conflate[n] = pr.sub.conflation
					if pr.sub.conflation {
						t := true
						res.body.Conflation = &t
					}
					continue
				}
			}
			registrar := m == nil && pr.pinned
			m = b.registerGroup(n, pr.group, pr.sub, now)
			if registrar {
				// The conflating registrar writes a row on every partition
				// at its seed (rsm/consume/pop.rs bulk_seed).
				for _, p := range q.parts {
					b.cursorOf(p, pr.group).row = true
				}
			}
			conflate[n] = m.conflation
			if m.conflation {
				t := true
				res.body.Conflation = &t
			}
			if pr.conflateReq != nil && *pr.conflateReq != m.conflation {
				t := true
				res.body.ConflationConflict = &t
			}
		}
	}

	// The claimable partitions, oldest waiting message first.
	var cands []candidate
	note := func(t time.Time) {
		if !t.IsZero() && (res.nextAt.IsZero() || t.Before(res.nextAt)) {
			res.nextAt = t
		}
	}
	for _, q := range queues {
		for _, p := range q.parts {
			if pr.pinned && p.name != pr.partition {
				continue
			}
			if at, held := p.windowHeld(now); held {
				note(at)
				continue
			}
			committed := int64(-1)
			if c := p.cursors[pr.group]; c != nil {
				if l := c.liveLease(now); l != nil {
					note(l.until().Add(time.Nanosecond))
					continue
				}
				committed = c.committed
			} else {
				committed = b.seed(p, pr.group)
			}
			if committed >= p.lastOffset() {
				continue
			}
			m := p.msgs[committed+1]
			if !p.visible(m, now) {
				note(p.visibleAt(m))
				continue
			}
			cands = append(cands, candidate{p: p, next: m})
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, c := cands[i], cands[j]
		if !a.next.createdAt.Equal(c.next.createdAt) {
			return a.next.createdAt.Before(c.next.createdAt)
		}
		return a.p.id < c.p.id
	})

	width, budget := pr.maxParts, pr.budget
	lane := laneKey{pr.queue, pr.group}
	if pr.autoParts || pr.autoBatch {
		width, budget = b.ap.plan(lane, len(cands), pr.autoParts, pr.autoBatch, width, budget)
		res.body.Autopilot = &wire.AutopilotEcho{Partitions: width, Batch: budget}
	}
	if pr.pinned {
		width = 1
	}

	wireLease := leaseID
	if pr.autoAck {
		wireLease = ""
	}
	delivered := 0
	for _, cd := range cands {
		if res.claimed >= width || budget <= 0 {
			break
		}
		p := cd.p
		c := b.cursorOf(p, pr.group)
		last := p.lastOffset()
		var offs []int64
		if named && conflate[p.q.name] {
			for o := last; o > c.committed; o-- {
				if p.visible(p.msgs[o], now) {
					offs = []int64{o}
					break
				}
			}
		} else {
			for o := c.committed + 1; o <= last && len(offs) < budget; o++ {
				if !p.visible(p.msgs[o], now) {
					break
				}
				offs = append(offs, o)
			}
		}
		if len(offs) == 0 {
			continue
		}
		budget -= len(offs)
		c.row = true
		if res.claimed == 0 {
			res.body.Partition, res.body.PartitionID = p.name, p.pid()
		}
		res.claimed++
		// The claim's delivery attempt: a claim that starts where the
		// cursor's previous leased claim started is a redelivery; any other
		// start is a first delivery. Commit on delivery is always attempt 1
		// and leaves the marker alone.
		attempt, prevOff, prevCount := 1, c.attemptOff, c.attemptCount
		if !pr.autoAck {
			start := c.committed + 1
			if c.attemptOff == start {
				attempt = c.attemptCount + 1
			}
			c.attemptOff, c.attemptCount = start, attempt
		}
		for _, off := range offs {
			m := p.msgs[off]
			res.body.Messages = append(res.body.Messages, wire.PopMessage{
				ID: m.id, TransactionID: m.txn, TraceID: nullString(m.traceID), Data: wire.Payload{Raw: m.payload},
				CreatedAt: isoMillis(m.createdAt), PartitionID: p.pid(), Partition: p.name,
				LeaseID: wireLease, ConsumerGroup: pr.group, DeliveryAttempt: attempt, Offset: wire.Int(m.offset),
			})
		}
		delivered += len(offs)
		end := offs[len(offs)-1]
		if pr.autoAck {
			c.setCommitted(end, now) // commit on delivery: nothing to ack
			c.release()
			continue
		}
		secs := pr.leaseSec
		if secs <= 0 {
			secs = p.q.cfg.leaseSeconds()
			if pr.discover {
				secs = discoveryLease
			}
		}
		c.lease = &lease{
			id: leaseID, acquired: now, expires: now.Add(time.Duration(secs) * time.Second),
			end: end, delivered: offs, conflated: named && conflate[p.q.name],
			prevAttemptOff: prevOff, prevAttemptCount: prevCount,
		}
	}
	res.body.PartitionsClaimed = res.claimed
	if res.claimed > 0 {
		res.body.LeaseID = wireLease
		if (pr.autoParts || pr.autoBatch) && !pr.autoAck {
			b.ap.delivered(lane, leaseID, delivered, now)
		}
	}
	return res
}

// nullString is a stored optional string as the wire carries it.
func nullString(s *string) wire.NullString {
	if s == nil {
		return ""
	}
	return wire.NullString(*s)
}

// nack gives back a claim nobody received. Callers hold mu.
func (b *broker) nack(leaseID string, msgs []wire.PopMessage) {
	for _, m := range msgs {
		pid, err := strconv.ParseInt(m.PartitionID, 10, 64)
		p := b.parts[pid]
		if err != nil || p == nil {
			continue
		}
		c := p.cursors[m.ConsumerGroup]
		if c == nil {
			continue
		}
		if c.lease != nil && c.lease.id == leaseID {
			// The attempt the claim counted is taken back with it.
			c.attemptOff, c.attemptCount = c.lease.prevAttemptOff, c.lease.prevAttemptCount
			c.lease = nil
		}
	}
	b.bump()
}
