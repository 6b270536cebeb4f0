package queen

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/queen-go/queen/internal/transport"
)

// The settler: when the last group of a pop is done, its outcomes go to
// the broker in ONE batch ack for the whole lease, the messages without an
// outcome as retry (given back at once, no retry spent), which also frees
// the partition of a failed message (PROTOCOL.md §15, §16). Left out: the
// messages a handler acked itself, and every message of a lost lease.

// settler counts the pops not yet settled: busy from answer to ack,
// holding while held for retryDelay (holdFailed), pending after a stop
// until quiet, settling once taken from pending.
type settler struct {
	busy     int      // pops not yet settled
	holding  int      // pops held for retryDelay (holdFailed)
	pending  []*batch // pops to settle once quiet (after a stop)
	settling int      // pops taken from pending and being settled
}

// add counts one more pop in hand.
func (s *settler) add() { s.busy++ }

// holdStart counts a pop held for retryDelay; holdEnd ends that hold, and
// keeps the pop for take when a stop ended it (stopped).
func (s *settler) holdStart() { s.holding++ }

func (s *settler) holdEnd(b *batch, stopped bool) {
	s.holding--
	if stopped {
		s.hold(b)
	}
}

// hold keeps a pop whose groups are all done and that its goroutine did
// not settle (after a stop) for take.
func (s *settler) hold(b *batch) { s.pending = append(s.pending, b) }

// take gives the next pop held, once quiet.
func (s *settler) take(quiet bool) *batch {
	if len(s.pending) == 0 || !quiet {
		return nil
	}
	b := s.pending[0]
	s.pending = s.pending[1:]
	s.settling++
	return b
}

// done counts a pop settled (late: one that take gave).
func (s *settler) done(late bool) {
	if late {
		s.settling--
	}
	s.busy--
}

// idle says whether no pop is held for retryDelay, waits for quiet or is
// being settled after a stop.
func (s *settler) idle() bool { return s.settling == 0 && len(s.pending) == 0 && s.holding == 0 }

// groupDone takes a group back from its goroutine; the goroutine that
// ends a pop's last group settles it (after a stop, the pop waits for
// quiet), and a pop held for retryDelay goes on on a goroutine of its own.
func (e *engine) groupDone(g *group) {
	b := g.b
	last := b.left.Add(-1) == 0
	now := last && !g.goexit && !e.stopping()
	held := now && e.settle(b)
	if g.goexit {
		e.log.Error("queen: consume handler ended its goroutine (runtime.Goexit); the loop stops",
			"queue", e.cfg.queue, "group", e.cfg.group)
	}
	l := e.lock()
	defer e.unlock()
	if g.goexit {
		e.startSlot(false) // in the place of the worker that ended: the stop path needs workers
	}
	if held {
		e.life.spawn(func() { e.holdFailed(b) })
	}
	l.groupDone(g, last, now, held)
}

// groupDone is engine.groupDone's part under the loop: the group's place,
// and its pop's when it was the last (settled now, held for retryDelay,
// or kept for the settle after a stop).
func (l *loop) groupDone(g *group, last, now, held bool) {
	l.sched.done(g)
	if g.goexit {
		l.stop(errHandlerGoexit)
	}
	switch {
	case held:
		l.settler.holdStart()
	case now:
		l.settled(g.b, false)
	case last:
		l.settler.hold(g.b)
	}
	l.changed()
}

// settledLate takes back a pop settled after a stop.
func (e *engine) settledLate(b *batch) {
	l := e.lock()
	l.settled(b, true)
	l.changed()
	e.unlock()
}

// settled ends the hold of a settled pop; the Limit, once all handled and
// settled, stops the loop.
func (l *loop) settled(b *batch, late bool) {
	l.settler.done(late)
	handled := 0
	for _, g := range b.groups {
		handled += g.handled
	}
	reached := l.fetcher.onSettle(len(b.msgs), handled, l.cfg.slots)
	b.cancel(nil)
	if reached {
		l.stop(nil)
	}
}

// outcomes is the pop's batch ack: each group's outcomes, then its
// messages without one as retry. (A pop of one group that handled all its
// messages has them all in that group's outcomes: those are the ack.)
func (b *batch) outcomes() []Settlement {
	if len(b.groups) == 1 && b.groups[0].next == len(b.groups[0].msgs) {
		return b.groups[0].acks
	}
	acks := make([]Settlement, 0, len(b.msgs))
	for _, g := range b.groups {
		acks = append(acks, g.acks...)
		for _, m := range g.msgs[g.next:] {
			acks = append(acks, Settlement{Message: m, Status: StatusRetry})
		}
	}
	return acks
}

// lost says whether the pop's lease was lost while it was handled.
func (b *batch) lost() bool {
	if leaseLost(b.ctx) {
		return true
	}
	for _, g := range b.groups {
		if g.lost {
			return true
		}
	}
	return false
}

// heldAcks is the part of a pop's ack that waits for the queue's
// retryDelay (settle, holdFailed): the partitions with a failure given
// back as retry, the outcomes chosen and the statuses sent side by side.
type heldAcks struct {
	chosen, sent []Settlement
	d            time.Duration // how long the hold lasts
}

// settle ends a pop: its outcomes become the statuses sent (the failure
// count), the renewals stop, and its batch ack goes out. While the loop
// runs, a partition with a failure given back waits for retryDelay: the
// other partitions are acked now, the rest kept in b.held, and settle
// says held (holdFailed calls it again after the wait).
func (e *engine) settle(b *batch) (held bool) {
	var chosen, sent []Settlement
	switch {
	case b.held != nil: // the rest of a held pop, after its hold
		chosen, sent = b.held.chosen, b.held.sent
	case !b.lost():
		chosen = b.outcomes()
		sent = chosen
		if i := slices.IndexFunc(chosen, func(s Settlement) bool { return s.Status == StatusFailed }); i >= 0 {
			rule := e.readRule(chosen[i].Message)
			var retried bool
			if sent, retried = e.failures.apply(rule, chosen); retried && !e.stopping() {
				if d := e.holdFor(b, rule); d > 0 {
					// The partitions with no failure held back are acked now
					// (a lease is held per partition), the rest after the hold.
					var nowC, nowS []Settlement
					chosen, sent, nowC, nowS = splitHeld(chosen, sent)
					if len(nowS) > 0 {
						e.sendAcks(b, nowC, nowS)
					}
					b.held = &heldAcks{chosen: chosen, sent: sent, d: d}
					return true
				}
			}
		} else {
			e.failures.settled(chosen)
		}
	}
	b.keeper.stop()
	if b.lost() {
		when := "while handling"
		if b.held != nil {
			when = "while held for retryDelay"
		}
		e.log.Warn("queen: lease lost "+when+"; the pop's outcomes are not acked",
			"queue", e.cfg.queue, "group", e.cfg.group, "leaseId", b.leaseID, "messages", len(b.msgs))
	} else if len(sent) > 0 {
		e.sendAcks(b, chosen, sent)
	}
	return false
}

// holdFailed holds a pop's failed partitions for the queue's retryDelay
// (holdFor), on a goroutine of its own so that no handler waits, then acks
// them. The lease is held meanwhile. A stop ends the hold at once (the pop
// is then settled with the stop's acks); a lost lease sends nothing.
// docs/RETRIES.md tells why.
func (e *engine) holdFailed(b *batch) {
	t := time.NewTimer(b.held.d)
	select {
	case <-t.C:
	case <-e.life.stopCh:
	case <-b.ctx.Done(): // the lease is lost
	}
	t.Stop()
	l := e.lock()
	if e.stopping() {
		l.holdEnd(b, true)
		e.unlock()
		return
	}
	e.unlock()
	e.settle(b)
	e.lock().holdEnd(b, false)
	e.unlock()
}

// holdEnd ends the hold of b: settled (its ack went), or after a stop
// kept for the settle with the stop's other acks.
func (l *loop) holdEnd(b *batch, stopped bool) {
	if stopped && l.phase == running {
		l.stop(nil) // a ctx that ended: as next does
	}
	l.settler.holdEnd(b, stopped)
	if !stopped {
		l.settled(b, false)
	}
	l.changed()
}

// holdFor is how long holdFailed holds b (0 or less: not at all).
func (e *engine) holdFor(b *batch, rule retryRule) time.Duration {
	// The shorter of the pops' LeaseTime and the queue's: a 0.15.1 broker
	// ignores the pops' and leases for the queue's time.
	d, lease := rule.delay, rule.lease
	if e.cfg.lease > 0 && (lease == 0 || e.cfg.lease < lease) {
		lease = e.cfg.lease
	}
	if b.keeper == nil && lease > 0 {
		d = min(d, lease/2-time.Since(b.poppedAt))
	}
	return d
}

// splitHeld parts a pop's ack (chosen and sent side by side) into the
// partitions with a failure sent as retry, held for retryDelay, and the
// others, acked at once.
func splitHeld(chosen, sent []Settlement) (heldC, heldS, nowC, nowS []Settlement) {
	var held []*Message
	for i, s := range sent {
		if chosen[i].Status == StatusFailed && s.Status == StatusRetry {
			held = append(held, s.Message)
		}
	}
	for i, s := range sent {
		if slices.ContainsFunc(held, func(m *Message) bool { return samePartition(m, s.Message) }) {
			heldC, heldS = append(heldC, chosen[i]), append(heldS, s)
		} else {
			nowC, nowS = append(nowC, chosen[i]), append(nowS, s)
		}
	}
	return heldC, heldS, nowC, nowS
}

// sendAcks sends a pop's acks, and again after retryBackoff while the
// failure is transient, for up to settleTimeout (the loop's one retry
// layer for acks, consume_broker.go).
func (e *engine) sendAcks(b *batch, chosen, acks []Settlement) {
	ctx, end := context.WithTimeout(e.life.reqCtx, settleTimeout)
	defer end()
	backoff := newRetryBackoff(e.cfg.retry)
	start := e.hooks.now()
	var err error
	var res []AckResult
	defer func() {
		group := e.cfg.group
		if group == "" {
			group = messageGroup(acks[0].Message)
		}
		e.hooks.settled(ctx, group, chosen, acks, res, start, err) // SettleHook: the settlement, its retries included
	}()
	for {
		res, err = e.b.settle(ctx, acks)
		if err == nil {
			return
		}
		e.loopError(&LoopError{Op: LoopOpSettle, LeaseID: b.leaseID, Messages: len(acks), Err: err})
		var ae *AckError
		if errors.As(err, &ae) {
			e.log.Warn("queen: broker refused some acks of a pop", "queue", e.cfg.queue, "group", e.cfg.group, "err", err)
			return
		}
		if transientSettleError(err) && ctx.Err() == nil {
			d := backoff.failed(err)
			e.log.Warn("queen: batch ack failed; sending it again", "queue", e.cfg.queue, "group", e.cfg.group,
				"messages", len(acks), "err", err, "backoff", d)
			t := time.NewTimer(d)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
			}
		}
		e.log.Error("queen: batch ack failed; its messages come back when their lease ends",
			"queue", e.cfg.queue, "group", e.cfg.group, "leaseId", b.leaseID, "messages", len(acks), "err", err)
		return
	}
}

// transientSettleError says whether sending an ack again may succeed: not
// after a refusal of the request itself (4xx other than 408 and 429, an
// answer that is not an ack result, an invalid ack, a closed client).
func transientSettleError(err error) bool {
	if errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalidArgument) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var be *BrokerError
	if errors.As(err, &be) {
		return retryableStatus(be.Status)
	}
	return transport.RetryableErr(err)
}
