package queen

import (
	"context"
	"sync"
	"time"
)

// The stop path: a loop is running until a stop (loop.stop: a ctx ended,
// the Limit, IdleMillis, a refusal for good, a handler's or a callback's
// Goexit), then draining: no pop or handler call starts; parts waiting for
// a handler or for a retry give their messages back; pops in flight get answerOnItsWay
// and are abandoned (an answer that comes meanwhile is given back);
// handlers running get the grace period; acks wait until quiet (no pop of
// the loop parked at the broker can claim what they free), and are given
// up, those in flight cancelled, at the grace period and settleTimeout
// after the stop (settleBy); renewals and reads of the queue's settings
// are not waited for. When every pop
// is settled and nothing is in flight, run returns. docs/ARCHITECTURE.md
// (Its contexts) tells the four contexts: ctx (Execute's, ended also by
// Consume's), pollCtx (the pops'), hctx (the handlers'), reqCtx (acks,
// renewals, reads of the queue's settings).

type phase int

const (
	running phase = iota
	draining
)

// lifecycle is the loop's contexts, the stop's channel and its goroutines:
// made by init, then only read (stopCh closed once, by the owner).
type lifecycle struct {
	stopCh chan struct{} // closed when the stop begins
	wg     sync.WaitGroup

	ctx context.Context // Execute's, ended also by Consume's
	end func()          // releases ctx
	// consumeDone is Consume's ctx's Done (nil: none), for stopping: ctx
	// ends after Consume's only once AfterFunc's goroutine ran.
	consumeDone <-chan struct{}
	pollCtx     context.Context
	pollCancel  context.CancelFunc
	hctx        context.Context
	hcancel     context.CancelCauseFunc
	reqCtx      context.Context
	reqCancel   context.CancelFunc
}

// init makes the contexts of a loop over Execute's ctx and Consume's
// (nil: none).
func (l *lifecycle) init(execCtx, consumeCtx context.Context) {
	if execCtx == nil {
		execCtx = context.Background()
	}
	l.stopCh = make(chan struct{})
	ctx, cancel := context.WithCancel(execCtx)
	l.ctx, l.end = ctx, cancel
	hbase := execCtx
	if consumeCtx != nil {
		hbase = consumeCtx
		if consumeCtx.Err() != nil {
			cancel() // at once: no pop goes after a ctx that has ended
		}
		l.consumeDone = consumeCtx.Done()
		// AfterFunc's goroutine ends within Execute too: end waits for it
		// when it has started.
		ran := make(chan struct{})
		unhook := context.AfterFunc(consumeCtx, func() { cancel(); close(ran) })
		l.end = func() {
			if !unhook() {
				<-ran
			}
			cancel()
		}
	}
	l.reqCtx, l.reqCancel = context.WithCancel(context.WithoutCancel(execCtx))
	l.pollCtx, l.pollCancel = context.WithCancel(l.reqCtx)
	l.hctx, l.hcancel = context.WithCancelCause(context.WithoutCancel(hbase))
}

// spawn runs f on a goroutine of the loop: run waits for them all.
func (l *lifecycle) spawn(f func()) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		f()
	}()
}

// stopped says whether the stop began.
func (l *lifecycle) stopped() bool {
	select {
	case <-l.stopCh:
		return true
	default:
		return false
	}
}

// ended says whether Execute's ctx or Consume's has ended.
func (l *lifecycle) ended() bool {
	if l.ctx.Err() != nil {
		return true
	}
	select {
	case <-l.consumeDone:
		return true
	default:
		return false
	}
}

// stopping says whether the loop is stopping, for the workers too. It
// reads the ctxs itself rather than wait for the owner to notice: a
// message is not started after either has ended.
func (e *engine) stopping() bool {
	return e.life.stopped() || e.life.ended()
}

// giveUpAcks ends a stop's acks at its bound (settleBy: the grace period
// and settleTimeout after the stop): the requests in flight are cancelled
// (reqCtx), the acks not sent are dropped and nothing more is acked;
// their messages come back when their lease runs out.
func (l *loop) giveUpAcks() {
	l.acksOver = true
	l.life.reqCancel()
	n := 0
	for _, pt := range l.outbox {
		n += len(pt.pending) - pt.sending + len(pt.heldAcks)
		pt.pending = pt.pending[:pt.sending]
		pt.heldAcks = nil
		l.check(pt)
	}
	if n > 0 || l.acking > 0 {
		l.log.Error("queen: the stop's last acks did not reach the broker in time; their messages come back when their lease ends",
			"queue", l.cfg.queue, "group", l.cfg.group, "unsent", n, "bound", l.cfg.grace+settleTimeout)
	}
}

// stop is the one way from running to draining; err is what Execute
// returns (nil: a ctx, Limit or idle stop; a later stop's error does not
// replace an earlier one).
func (l *loop) stop(err error) {
	if l.fatal == nil {
		l.fatal = err
	}
	if l.phase != running {
		return
	}
	now := time.Now()
	l.phase = draining
	close(l.life.stopCh)
	if l.fetcher.inflight == 0 {
		l.fetcher.abandon(l.life.pollCancel)
	} else {
		l.drainAt = now.Add(answerOnItsWay)
	}
	if l.cfg.grace > 0 {
		l.graceAt = now.Add(l.cfg.grace)
	} else {
		l.life.hcancel(errConsumeStopped)
	}
	l.settleBy = now.Add(l.cfg.grace + settleTimeout)
	// Failures waiting for the queue's settings: given back (retry, their
	// count kept here), without waiting for the read.
	l.unpark(func(pt *part, r result) {
		if pt.whole {
			l.giveBack(pt, 0, nil)
			return
		}
		m := pt.msgs[r.i]
		l.failures.failed(m)
		l.giveBack(pt, r.i+1, &ackItem{s: Settlement{Message: m, Status: StatusRetry, Error: r.o.Error}, chosen: StatusFailed})
	})
	// Parts that wait for a handler or for a retry: given back.
	for _, pt := range l.queued {
		l.giveBackAtStop(pt) // a retry that is due included
	}
	l.queued = l.queued[:0]
	for _, pt := range l.held {
		l.endHold(pt)
	}
	l.held = l.held[:0]
}
