package queen

import (
	"context"
	"time"
)

// The lease keeper: with RenewLease(true, ms), every pop's lease is renewed
// every ms from its answer until its ack goes (the renewals go on during
// the grace period after a stop: they never use a cancelled ctx). A
// renewal that fails on the way is tried again at the next tick; one the
// broker answers "lost" cancels the handlers of that pop (their ctx's
// cause matches ErrLeaseLost), and their outcomes are not acked.

// renewSeconds is how far each renewal extends a lease: about three
// renewal intervals (rounded up to whole seconds, the broker's unit, by
// the one rounding rule, ceilUnits). Two
// renewals may then fail in a row and the lease still holds, while a
// worker that crashed has its messages back about three intervals after
// its last renewal (or when the lease it got at the pop runs out, if that
// is later: a renewal never shortens a lease).
func renewSeconds(everyMs int) int {
	return max(1, int(ceilUnits(3*time.Duration(everyMs)*time.Millisecond, time.Second)))
}

// leaseKeeper renews one pop's lease while its handlers run.
type leaseKeeper struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// keepLease starts renewing b's lease.
func (e *engine) keepLease(b *batch) *leaseKeeper {
	ctx, cancel := context.WithCancel(e.life.reqCtx)
	k := &leaseKeeper{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(k.done)
		t := time.NewTicker(e.cfg.renewEvery)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, renewTimeout)
			alive, err := e.b.renew(rctx, b.leaseID, e.cfg.renewSecs)
			rcancel()
			if ctx.Err() != nil {
				return // settled meanwhile: the answer no longer matters
			}
			// RenewHook and LeaseLostHook: reported by the broker (clientBroker.renew).
			switch {
			case err != nil:
				if !failing {
					e.log.Warn("queen: lease renewal failed; trying again at the next tick",
						"queue", e.cfg.queue, "group", e.cfg.group, "leaseId", b.leaseID, "err", err)
				}
				failing = true
				e.loopError(&LoopError{Op: LoopOpRenew, LeaseID: b.leaseID, Messages: len(b.msgs), Err: err})
			case !alive:
				e.log.Warn("queen: lease lost; cancelling its handlers, their outcomes are not acked",
					"queue", e.cfg.queue, "group", e.cfg.group, "leaseId", b.leaseID, "messages", len(b.msgs))
				b.cancel(errLeaseLostCause)
				e.loopError(&LoopError{Op: LoopOpLease, LeaseID: b.leaseID, Messages: len(b.msgs), Err: errLeaseLostCause})
				return
			default:
				if failing {
					e.log.Info("queen: lease renewed again", "queue", e.cfg.queue, "group", e.cfg.group, "leaseId", b.leaseID)
				}
				failing = false
			}
		}
	}()
	return k
}

// stop ends the renewals and waits for the keeper to exit (a renewal in
// flight is abandoned).
func (k *leaseKeeper) stop() {
	if k == nil {
		return
	}
	k.cancel()
	<-k.done
}
