package queen

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/queen-go/queen/internal/transport"
)

// Settle: each outcome is acked as soon as the sender is free. Whatever
// is acked at the time goes in one batch ack, across partitions and pops;
// what completes while it is on its way goes in the next. A partition's
// acks go in its order, each in a request after the previous one's (the
// sender has one job in flight, and a job's requests never share a
// partition: split), and its dlq, retry or failed (which
// end its lease on 2.x, PROTOCOL.md §4.1, §15) goes with everything of
// the partition after it: completions after a dead letter wait for it, and
// a give-back sends the rest of the partition as retry in the same
// request. After a stop the acks wait until quiet (no pop of the loop can
// claim what they free). A failing ack is sent again by the owner after a
// backoff (the outage logged at Warn at its start and end); a refusal is
// logged, and one that follows an attempt whose answer was lost is taken
// for what it most likely is, an ack that attempt applied.

// Quick handlers: while a worker runs a partition's messages one after
// another in quick succession (each call under quickCall), their acks
// gather for up to ackLinger before a request goes for them alone, so
// that a batch of quick messages costs one ack, not one for its first
// message and one for the rest. A slow handler's ack goes at once.
const (
	quickCall = 200 * time.Microsecond
	ackLinger = 2 * time.Millisecond
)

// linger notes a message's ack that may wait for the part's next ones:
// the worker goes on with the part and the call was quick.
func (l *loop) linger(pt *part, r result) {
	if r.end || !r.fast || pt.state != partBusy {
		pt.lingerTill = time.Time{}
		return
	}
	if pt.lingerTill.IsZero() {
		pt.lingerTill = time.Now().Add(ackLinger)
	}
}

// lingering says whether pt's acks may wait at now.
func (pt *part) lingering(now time.Time) bool {
	return !pt.lingerTill.IsZero() && now.Before(pt.lingerTill) && pt.state == partBusy
}

// signal says whether a status ends a partition's lease on some broker:
// what follows it in the partition must go in the same request.
func signal(s AckStatus) bool { return s != StatusCompleted }

// addAck queues an ack of pt.
func (l *loop) addAck(pt *part, it ackItem) {
	if pt.p.lost || l.acksOver {
		return
	}
	if pt.pending == nil {
		pt.pending = make([]ackItem, 0, len(pt.msgs)-pt.next+1) // room for the rest of the part
	}
	pt.pending = append(pt.pending, it)
	l.post(pt)
	if signal(it.s.Status) {
		pt.signal = true
	}
}

// post puts pt in the outbox, if it is not there.
func (l *loop) post(pt *part) {
	if !pt.posted {
		pt.posted = true
		l.outbox = append(l.outbox, pt)
	}
}

// tidy drops the parts with nothing left to send from the outbox.
func (l *loop) tidy() {
	l.outbox = slices.DeleteFunc(l.outbox, func(pt *part) bool {
		if len(pt.pending) > 0 || pt.sending > 0 {
			return false
		}
		pt.posted = false
		return true
	})
}

// giveBack resolves pt: first (when given) and every message from
// msgs[from] on are acked, the others as retry (no retry spent).
func (l *loop) giveBack(pt *part, from int, first *ackItem) {
	l.resolvedMsg(pt)
	l.setState(pt, partIdle)
	if first != nil {
		l.addAck(pt, *first)
	}
	for _, m := range pt.msgs[min(from, len(pt.msgs)):] {
		l.addAck(pt, ackItem{s: Settlement{Message: m, Status: StatusRetry}, chosen: StatusRetry})
	}
	pt.next, pt.resolved = len(pt.msgs), true
	l.check(pt)
}

// drop resolves pt of a lost lease: nothing more of it is acked (its
// messages are, or will be, with another worker).
func (l *loop) drop(pt *part) {
	l.resolvedMsg(pt)
	l.queued = deleteOne(l.queued, pt)
	l.held = deleteOne(l.held, pt)
	l.rules.parked = deleteOne(l.rules.parked, pt)
	pt.pending = pt.pending[:pt.sending]
	pt.heldAcks, pt.parked = nil, nil
	pt.resolved = true
	if pt.state != partBusy {
		l.setState(pt, partIdle)
	}
	l.check(pt)
}

// sendable is how many of pt's acks may go now: all of them once the part
// is resolved, else those before its first dlq, retry or failed (a batch
// handler's are all final when they come).
func (pt *part) sendable() int {
	if pt.resolved || pt.whole || !pt.signal {
		return len(pt.pending)
	}
	for i, it := range pt.pending {
		if signal(it.s.Status) {
			return i
		}
	}
	return len(pt.pending)
}

// settledNews is what check found since the owner last took it
// (loop.settledFound, consume_engine.go): the partitions freed, and the
// pops settled with the Limit units they held and used.
type settledNews struct {
	freed        int // parts settled: their partition is free
	pops         int // pops settled
	units, calls int // of those pops: Limit units held, handler calls made
}

// check settles pt once it is resolved and every ack of it answered, and
// its pop once every part is: the pop leaves the loop. What that frees
// (a partition, a pop's Limit units) is noted in l.news for the owner,
// which paces the pops by it and stops at the Limit.
func (l *loop) check(pt *part) {
	if pt.settled || !pt.resolved || pt.state == partBusy || pt.sending > 0 || len(pt.pending) > 0 || len(pt.heldAcks) > 0 {
		return
	}
	pt.settled = true
	l.occupying--
	l.news.freed++
	p := pt.p
	if p.open--; p.open > 0 {
		return
	}
	l.pops = slices.DeleteFunc(l.pops, func(o *pop) bool { return o == p })
	l.renewals = slices.DeleteFunc(l.renewals, func(o *pop) bool { return o == p })
	p.renewAt = time.Time{}
	p.cancel(nil)
	l.lastBusy = time.Now()
	l.news.pops++
	l.news.units += p.units
	l.news.calls += p.calls
}

// ackState is the outbox's backoff after a failed ack request and the
// outage it logs.
type ackState struct {
	backoff   retryBackoff
	pauseTill time.Time // no ack request before
	since     time.Time // the outage's first failure (zero: none)
}

// wakeAt is when acks held back (by a backoff, or lingering) may go
// (zero: none held): the backoff's end while it runs, then the end of
// the first linger (a backoff that ended may leave acks lingering).
func (a *ackState) wakeAt(l *loop, now time.Time) time.Time {
	if now.Before(a.pauseTill) {
		if l.ackable(time.Time{}) > 0 {
			return a.pauseTill
		}
		return time.Time{}
	}
	var at time.Time
	for _, pt := range l.outbox {
		if pt.lingering(now) && pt.sending == 0 && pt.sendable() > 0 && (at.IsZero() || pt.lingerTill.Before(at)) {
			at = pt.lingerTill
		}
	}
	return at
}

// ackable counts the acks that may go in a job at now, those of parts
// whose acks linger included; 0 when every part with acks to send
// lingers (now zero: none lingers) or has acks in flight.
func (l *loop) ackable(now time.Time) int {
	n, due := 0, false
	for _, pt := range l.outbox {
		if pt.sending > 0 {
			continue
		}
		if k := pt.sendable(); k > 0 {
			n += k
			due = due || now.IsZero() || !pt.lingering(now)
		}
	}
	if !due {
		return 0
	}
	return n
}

// flush gives the sender the ack jobs that may go (open: the stop lets
// acks go, that is the loop runs or is quiet; never during a backoff): one
// job when none is in flight, what completed meanwhile in the next; beside
// jobs in flight another only for a batch's worth (ackChunk acks or more),
// up to Concurrency ack jobs at once (a 0.15.1 broker settles acks one by
// one in PostgreSQL, and serves several requests side by side). A part
// with acks in flight waits for their answer.
func (l *loop) flush(now time.Time, open bool) {
	if !open || now.Before(l.acks.pauseTill) {
		return
	}
	for l.acking < l.cfg.slots {
		n := l.ackable(now)
		if n == 0 || (l.acking > 0 && n < ackChunk) {
			return
		}
		l.acking++
		l.give(l.ackJob())
	}
}

// give hands j to the sender.
func (l *loop) give(j *job) {
	j.at = time.Now()
	l.sending++
	l.e.sendc <- j
}

// ackJob gathers every ack that may go, lingering ones included, into
// one job. It reuses an ack job answered before.
func (l *loop) ackJob() *job {
	var j *job
	if n := len(l.spares); n > 0 {
		j, l.spares = l.spares[n-1], l.spares[:n-1]
	} else {
		j = &job{kind: jobAck}
	}
	j.acks, j.chosen, j.retried, j.parts, j.reqs = j.acks[:0], j.chosen[:0], nil, j.parts[:0], j.reqs[:0]
	j.err = nil
	hooked := l.e.hooks != nil // the outcomes chosen are for the SettleHook
	l.tidy()
	for _, pt := range l.outbox {
		n := pt.sendable()
		if n == 0 || pt.sending > 0 {
			continue
		}
		pt.lingerTill = time.Time{}
		for _, it := range pt.pending[:n] {
			j.acks = append(j.acks, it.s)
			if hooked {
				j.chosen = append(j.chosen, Settlement{Message: it.s.Message, Status: it.chosen})
			}
			if it.retried && j.retried == nil {
				j.retried = make([]bool, len(j.acks)-1, cap(j.acks))
			}
			if j.retried != nil {
				j.retried = append(j.retried, it.retried)
			}
		}
		pt.sending = n
		j.parts = append(j.parts, pt)
	}
	l.split(j)
	return j
}

// ackChunk is the fewest acks a request of a job carries when the job is
// cut into several (up to Concurrency), which the sender sends at once:
// a broker that settles an ack per item (0.15.1, in PostgreSQL) serves
// several requests side by side, where one large request would take the
// time of all. So a job never makes more requests than Concurrency, nor
// more than one per ackChunk acks.
const ackChunk = 100

// split cuts j's acks into its requests, at part boundaries: one request,
// or, for more than ackChunk acks, up to Concurrency requests of at least
// ackChunk acks each.
func (l *loop) split(j *job) {
	size := max(ackChunk, (len(j.acks)+l.cfg.slots-1)/l.cfg.slots)
	from, k := 0, 0
	for _, pt := range j.parts {
		k += pt.sending
		if k-from >= size && k < len(j.acks) {
			j.reqs = append(j.reqs, ackReq{from: from, to: k})
			from = k
		}
	}
	j.reqs = append(j.reqs, ackReq{from: from, to: len(j.acks)})
}

// acked takes the answers to an ack job's requests: the acks answered
// are done (a refusal is logged); a transient failure puts its request's
// acks back for the next job, after a backoff; any other failure (or one
// that outlasts settleTimeout after a stop) gives them up: they come back
// when their lease runs out.
func (l *loop) acked(j *job) {
	now := time.Now()
	var failed *ackReq // the first transient failure
	retrying, answered, k, r := 0, false, 0, 0
	genuine, applied := 0, 0
	var first string
	for _, pt := range j.parts {
		for k >= j.reqs[r].to {
			r++
		}
		req := &j.reqs[r]
		res := req.res
		ae, refused := errors.AsType[*AckError](req.err)
		if refused {
			res = ae.Results
		}
		items := pt.pending[:pt.sending]
		switch {
		case req.err == nil || refused:
			answered = true
			for i, it := range items {
				a := res[k-req.from+i]
				if it.s.Status == StatusDLQ && (a.Success || it.retried) {
					l.failures.done(it.s.Message) // dead-lettered (or most likely): its count is done
				}
				if !a.Success {
					if it.retried {
						applied++
					} else {
						genuine++
						if first == "" {
							first = a.TransactionID + ": " + a.Error
						}
					}
				}
			}
		case (req.timedOut || transientSettleError(req.err)) && !l.giveUp(now, j.at) && !l.acksOver:
			if req.timedOut || errors.Is(req.err, ErrOutcomeUnknown) {
				for i := range items {
					items[i].retried = true
				}
			}
			if failed == nil {
				failed = req
			}
			retrying += len(items)
			k += pt.sending
			pt.sending = 0
			continue
		default:
			if k == req.from {
				l.log.Error("queen: ack failed; its messages come back when their lease ends",
					"queue", l.cfg.queue, "group", l.cfg.group, "messages", req.to-req.from, "err", req.err)
			}
		}
		k += pt.sending
		pt.answered()
		l.check(pt)
	}
	l.spares = append(l.spares, j)
	switch {
	case failed != nil:
		d := l.acks.backoff.failed(failed.err)
		l.acks.pauseTill = now.Add(d)
		if l.acks.since.IsZero() {
			l.acks.since = j.at
			l.log.Warn("queen: ack failed; the loop sends it again", "queue", l.cfg.queue, "group", l.cfg.group,
				"messages", retrying, "err", failed.err, "backoff", d)
		} else {
			l.log.Debug("queen: ack failed again", "queue", l.cfg.queue, "group", l.cfg.group,
				"messages", retrying, "err", failed.err, "failures", l.acks.backoff.failures, "backoff", d)
		}
	default:
		l.ackOutageEnds(now, answered)
	}
	if genuine > 0 {
		l.log.Warn("queen: broker refused acks", "queue", l.cfg.queue, "group", l.cfg.group,
			"refused", genuine, "messages", len(j.acks), "first", first)
	}
	if applied > 0 {
		l.log.Info("queen: acks refused after an attempt whose answer was lost: most likely that attempt applied them (outcome unknown)",
			"queue", l.cfg.queue, "group", l.cfg.group, "refused", applied)
	}
}

// answered drops the acks of pt the sender's request carried, keeping the
// rest at the front of its backing array.
func (pt *part) answered() {
	n := copy(pt.pending, pt.pending[pt.sending:])
	clear(pt.pending[n:])
	pt.pending, pt.sending = pt.pending[:n], 0
}

// giveUp says whether failing acks are given up now: after a stop, once
// they have failed for settleTimeout (since the first failed request went,
// sent at).
func (l *loop) giveUp(now, sent time.Time) bool {
	since := l.acks.since
	if since.IsZero() {
		since = sent
	}
	return l.phase != running && now.Sub(since) >= settleTimeout
}

// ackOutageEnds ends a run of failed ack requests: a Warn (the level of
// its start) saying how long and how many when they succeed again.
func (l *loop) ackOutageEnds(now time.Time, ok bool) {
	if l.acks.since.IsZero() {
		return
	}
	n := l.acks.backoff.reset()
	if ok {
		l.log.Warn("queen: acks succeed again", "queue", l.cfg.queue, "group", l.cfg.group,
			"failures", n, "after", now.Sub(l.acks.since).Round(time.Millisecond))
	}
	l.acks.since, l.acks.pauseTill = time.Time{}, time.Time{}
}

// sendAcks sends a job's ack requests, at once when there are several,
// and returns when every one got its answer (or failed).
// (A callback that ends a request's goroutine, runtime.Goexit, leaves
// that request's done false; the others are waited for all the same.)
func (e *engine) sendAcks(j *job) {
	if len(j.reqs) == 1 {
		e.sendAckReq(j, &j.reqs[0])
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range j.reqs[1:] {
		wg.Go(func() { e.sendAckReq(j, &j.reqs[1+i]) })
	}
	e.sendAckReq(j, &j.reqs[0])
}

// sendAckReq sends one ack request: one attempt, reported to OnLoopError
// when it fails and to the SettleHook when it got an answer (or failed
// for good).
func (e *engine) sendAckReq(j *job, r *ackReq) {
	acks := j.acks[r.from:r.to]
	ctx, cancel := context.WithTimeout(e.life.reqCtx, settleTimeout)
	start := e.hooks.now()
	r.res, r.err = e.b.settle(ctx, acks)
	r.timedOut = r.err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && e.life.reqCtx.Err() == nil
	cancel()
	var retried []bool
	if j.retried != nil {
		retried = j.retried[r.from:r.to]
	}
	ae, refused := errors.AsType[*AckError](r.err)
	if r.err != nil && !(refused && allRetried(ae, retried)) {
		e.loopError(&LoopError{Op: LoopOpSettle, LeaseID: oneLease(acks), Messages: len(acks), Err: r.err})
	}
	if r.err == nil || refused || (!r.timedOut && !transientSettleError(r.err)) {
		group := e.cfg.group
		if group == "" {
			group = messageGroup(acks[0].Message)
		}
		var chosen []Settlement
		if j.chosen != nil {
			chosen = j.chosen[r.from:r.to]
		}
		e.hooks.settled(e.life.reqCtx, group, chosen, acks, r.res, start, r.err) // SettleHook
	}
	r.done = true
}

// allRetried says whether every ack ae refused was sent before by an
// attempt whose answer was lost (retried: per ack; nil: none was).
func allRetried(ae *AckError, retried []bool) bool {
	if retried == nil {
		return false
	}
	for i, r := range ae.Results {
		if !r.Success && (i >= len(retried) || !retried[i]) {
			return false
		}
	}
	return true
}

// oneLease is the lease of acks when they are all of one pop, else "".
func oneLease(acks []Settlement) string {
	lease := acks[0].Message.LeaseID
	for _, a := range acks[1:] {
		if a.Message.LeaseID != lease {
			return ""
		}
	}
	return lease
}

// transientSettleError says whether sending an ack again may succeed: not
// after a refusal of the request itself (4xx other than 408 and 429, an
// invalid ack, a closed client, a cancelled request). An ack whose outcome
// is unknown (docs/RETRIES.md "may have been applied": a 5xx that may
// follow applying, a 2xx the client cannot read, an answer lost) is sent
// again: acks are idempotent on both brokers under the same lease, and a
// refusal of the repeat is taken for the first attempt applied (acked).
func transientSettleError(err error) bool {
	if errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalidArgument) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, ErrOutcomeUnknown) {
		return true
	}
	var be *BrokerError
	if errors.As(err, &be) {
		return retryableStatus(be.Status)
	}
	return transport.RetryableErr(err)
}
