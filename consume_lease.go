package queen

import (
	"context"
	"time"
)

// The leases: the owner schedules each pop's renewals, the sender sends
// them. With RenewLease(true, ms), every pop's lease is renewed every ms
// from its answer until the answer to its last ack (during the grace
// period after a stop too). Without it, a pop is renewed while it holds a
// failed message (from its failure until its outcome is final), so that
// its partition stays with the loop for the retry. A renewal that fails
// on the way is tried again at the next tick; one the broker answers
// "lost" while a message of the pop is unacked cancels the pop's handlers
// (their ctx's cause matches ErrLeaseLost), and nothing more of the pop
// is acked; once all its acks went, that answer is their release.

// renewSeconds is how far each renewal extends a lease: about three
// renewal intervals (rounded up to whole seconds, the broker's unit, by
// the one rounding rule, ceilUnits). Two renewals may then fail in a row
// and the lease still holds, while a worker that crashed has its messages
// back about three intervals after its last renewal (or when the lease it
// got at the pop runs out, if that is later: a renewal never shortens a
// lease).
func renewSeconds(everyMs int) int {
	return max(1, int(ceilUnits(3*time.Duration(everyMs)*time.Millisecond, time.Second)))
}

// Renewals of a held failure without RenewLease, when the lease's length
// is unknown.
const (
	heldRenewEvery = 10 * time.Second
	heldRenewSecs  = 30
)

// renewPlan is how often p is renewed and by how much (0: not renewed).
// Without RenewLease a pop holding a failure is renewed every third of
// its lease (the shorter of the pops' LeaseTime and the queue's, since a
// 0.15.1 broker ignores the pops'), each renewal extending it by a whole
// lease.
func (l *loop) renewPlan(p *pop) (time.Duration, int) {
	switch {
	case l.cfg.renewEvery > 0:
		return l.cfg.renewEvery, l.cfg.renewSecs
	case p.holding == 0:
		return 0, 0
	}
	lease := l.leaseLen()
	if lease <= 0 {
		return heldRenewEvery, heldRenewSecs
	}
	return max(lease/3, time.Second/4), int(ceilUnits(lease, time.Second))
}

// leaseLen is a pop's lease as far as the loop knows: the shorter of the
// pops' LeaseTime and the queue's (a 0.15.1 broker ignores the pops'); 0:
// unknown.
func (l *loop) leaseLen() time.Duration {
	lease := l.rules.rule.lease
	if l.cfg.lease > 0 && (lease == 0 || l.cfg.lease < lease) {
		lease = l.cfg.lease
	}
	return lease
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

// inLease brings the renewal at of p, holding a failure, within its
// lease: no later than when two thirds of its last grant have passed.
func inLease(p *pop, at time.Time) time.Time {
	if p.holding == 0 || p.leaseEnd.IsZero() {
		return at
	}
	if by := p.leaseEnd.Add(-p.grant / 3); by.Before(at) {
		return by
	}
	return at
}

// startRenewals schedules p's first renewal, if it is to be renewed and
// is not yet: with RenewLease one interval after its answer; for a held
// failure one interval after the answer or now, whichever is later. A
// pop holding a failure is renewed within its lease (inLease), whatever
// the interval: a renewal already scheduled is brought forward.
func (l *loop) startRenewals(p *pop) {
	if p.leaseID == "" || p.renewing {
		return
	}
	if !p.renewAt.IsZero() {
		p.renewAt = later(inLease(p, p.renewAt), time.Now())
		return
	}
	every, _ := l.renewPlan(p)
	if every <= 0 {
		return
	}
	p.renewAt = later(inLease(p, p.at.Add(every)), time.Now())
}

// renewDue queues the renewals that are due for the sender.
func (l *loop) renewDue(now time.Time) {
	for _, p := range l.pops {
		if p.renewing || p.lost || p.renewAt.IsZero() || now.Before(p.renewAt) {
			continue
		}
		p.renewing = true
		l.renewals = append(l.renewals, p)
	}
}

// giveRenewals gives the sender every renewal due, in order.
func (l *loop) giveRenewals() {
	for len(l.renewals) > 0 {
		p := l.renewals[0]
		l.renewals = l.renewals[1:]
		_, secs := l.renewPlan(p)
		l.give(&job{kind: jobRenew, p: p, leaseID: p.leaseID, secs: max(secs, 1), n: len(p.msgs)})
	}
}

// renewed takes a renewal's answer: a lease found gone while a message
// of the pop is still unacked is lost, which cancels the pop's handlers
// and drops its acks; one gone once every ack of the pop went (in flight
// or answered) was released by them; otherwise the next renewal is
// scheduled, while the pop is to be renewed.
func (l *loop) renewed(j *job) {
	p := j.p
	p.renewing = false
	if p.lost || !l.holds(p) {
		return
	}
	switch {
	case j.err != nil:
		if !p.failing {
			l.log.Warn("queen: lease renewal failed; trying again at the next tick",
				"queue", l.cfg.queue, "group", l.cfg.group, "leaseId", p.leaseID, "err", j.err)
		}
		p.failing = true
	case !j.alive && p.acksOut():
		// The pop's own acks released the lease (applied at the broker,
		// their answers on their way): no loss, nothing more to renew.
		l.log.Debug("queen: lease released by the pop's acks; its renewals end",
			"queue", l.cfg.queue, "group", l.cfg.group, "leaseId", p.leaseID)
		p.renewAt = time.Time{}
		return
	case !j.alive:
		l.leaseLost(p)
		return
	default:
		if p.failing {
			l.log.Info("queen: lease renewed again", "queue", l.cfg.queue, "group", l.cfg.group, "leaseId", p.leaseID)
		}
		p.failing = false
		grant := time.Duration(j.secs) * time.Second
		if end := j.at.Add(grant); end.After(p.leaseEnd) {
			p.leaseEnd = end
		}
		p.grant = grant
	}
	every, _ := l.renewPlan(p)
	if every <= 0 {
		p.renewAt = time.Time{}
		return
	}
	now := time.Now()
	if p.renewAt = p.renewAt.Add(every); !p.renewAt.After(now) {
		p.renewAt = now.Add(every)
	}
	next := inLease(p, p.renewAt)
	if j.err != nil {
		// Late in the lease (or past it) inLease says now: a renewal that
		// failed on the way goes again after a pause, not back to back.
		next = later(next, now.Add(every/3))
	}
	p.renewAt = later(next, now)
}

// holds says whether p is a pop in hand.
func (l *loop) holds(p *pop) bool {
	for _, o := range l.pops {
		if o == p {
			return true
		}
	}
	return false
}

// leaseLost ends a pop whose lease a renewal found lost: its handlers'
// ctx is cancelled, nothing more of it is handled or acked.
func (l *loop) leaseLost(p *pop) {
	l.log.Warn("queen: lease lost; cancelling its handlers, their outcomes are not acked",
		"queue", l.cfg.queue, "group", l.cfg.group, "leaseId", p.leaseID, "messages", len(p.msgs),
		"heldForRetry", p.holding > 0)
	p.lost = true
	p.renewAt = time.Time{}
	p.cancel(errLeaseLostCause)
	l.give(&job{kind: jobNote, note: &LoopError{Op: LoopOpLease, LeaseID: p.leaseID, Messages: len(p.msgs), Err: errLeaseLostCause}})
	for _, pt := range p.parts {
		if pt.state != partBusy { // a running one is dropped when its worker reports
			l.drop(pt)
		}
	}
}

// acksOut says whether every message of p has its ack on its way or
// answered (or needs none): a lease gone then was released by those acks.
func (p *pop) acksOut() bool {
	for _, pt := range p.parts {
		if !pt.acksOut() {
			return false
		}
	}
	return true
}

// acksOut says whether every message of pt has its ack sent (in flight or
// answered), or sent by an attempt that may have been applied and is to
// go again.
func (pt *part) acksOut() bool {
	if pt.settled {
		return true
	}
	if !pt.resolved || pt.state == partBusy || len(pt.heldAcks) > 0 {
		return false
	}
	for _, it := range pt.pending[pt.sending:] {
		if !it.retried {
			return false
		}
	}
	return true
}

// sendRenew is the sender's renewal: one attempt, reported to
// OnLoopError when it fails on the way (RenewHook and LeaseLostHook: the
// broker's, clientBroker.renew). Whether a lease found gone is lost is
// the owner's judgement (renewed), which reports a loss.
func (e *engine) sendRenew(j *job) {
	ctx, cancel := context.WithTimeout(e.life.reqCtx, renewTimeout)
	j.alive, j.err = e.b.renew(ctx, j.leaseID, j.secs)
	cancel()
	if j.err != nil && e.life.reqCtx.Err() == nil {
		e.loopError(&LoopError{Op: LoopOpRenew, LeaseID: j.leaseID, Messages: j.n, Err: j.err})
	}
}
