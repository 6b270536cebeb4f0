package queen

import (
	"context"
	"sync"
	"time"
)

// The lifecycle: a loop is running until a stop (loop.stop: a ctx ended,
// the Limit, IdleMillis, a refusal for good, a handler's Goexit), then
// draining: nothing starts, pops in flight get answerOnItsWay and are
// abandoned, handlers get the grace period, the acks wait until quiet
// (no pop of the loop parked at the broker). When nothing is left, done:
// Execute returns, no goroutine left. docs/ARCHITECTURE.md (Stop, Its
// contexts) tells the four contexts: ctx (Execute's, ended also by
// Consume's), pollCtx (the pops'), hctx (the handlers'), reqCtx (acks,
// renewals).

type phase int

const (
	running phase = iota
	draining
	done
)

// lifecycle is the loop's contexts, the channels of its stop path and its
// goroutines: made by init, then only read (the channels closed once
// each, by loop.stop and loop.changed).
type lifecycle struct {
	stopCh chan struct{} // closed when the stop begins
	doneCh chan struct{} // closed when the stop path is done
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
	l.stopCh, l.doneCh = make(chan struct{}), make(chan struct{})
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

// announceStop says the stop began (once: loop.stop).
func (l *lifecycle) announceStop() { close(l.stopCh) }

// finish says the stop path is done (once: loop.changed).
func (l *lifecycle) finish() { close(l.doneCh) }

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

// run starts the fetchers and workers and walks the stop path; it returns
// when it is done.
func (e *engine) run() error {
	l := &e.life
	e.lock().start()
	e.unlock()
	if e.stopping() {
		e.beginStop(nil) // a ctx that ended stops the loop before its first pop
	} else {
		e.readRule(nil) // the queue's retry settings, before its first pop can create it
	}
	for range e.cfg.slots {
		e.startSlot(true)
		e.startSlot(false)
	}
	defer func() {
		l.hcancel(errConsumeStopped)
		l.pollCancel()
		l.wg.Wait()
		l.reqCancel()
		l.end()
	}()

	// running: until a stop.
	var idle loopTimer
	if e.cfg.idle > 0 {
		idle.set(e.cfg.idle)
	}
	for running := true; running; {
		select {
		case <-l.stopCh:
			running = false
		case <-l.ctx.Done():
			e.beginStop(nil)
		case <-idle.c:
			idle.fired()
			if d := e.idleFor(); d > 0 {
				idle.set(d)
			}
		}
	}
	idle.stop()

	// draining: the drain of the pops in flight, the grace period, quiet.
	var drain, grace, quiet loopTimer
	defer func() { drain.stop(); grace.stop(); quiet.stop() }()
	if st := e.lock(); st.fetcher.inflight > 0 && l.pollCtx.Err() == nil {
		drain.set(answerOnItsWay)
	}
	e.unlock()
	if e.cfg.grace > 0 {
		grace.set(e.cfg.grace)
	} else {
		l.hcancel(errConsumeStopped)
	}
	for {
		select {
		case <-l.doneCh:
			defer e.unlock()
			return e.lock().fatal
		case <-drain.c:
			drain.fired()
			if e.lock().abandon() {
				quiet.set(abandonNoticed)
			}
			e.unlock()
		case <-quiet.c:
			quiet.fired()
			e.lock().changed() // quiet now: the acks held back may go
			e.unlock()
		case <-grace.c:
			grace.fired()
			l.hcancel(errConsumeStopped)
		}
	}
}

// start readies the loop's parts before its first pop.
func (l *loop) start() { l.fetcher.start(l.cfg.retry) }

// abandon gives up the pops in flight after a stop (fetcher.abandon).
func (l *loop) abandon() bool { return l.fetcher.abandon(l.life.pollCancel) }

// idleFor stops the loop after IdleMillis with no pop in hand, or says how
// long to wait before asking again.
func (e *engine) idleFor() time.Duration {
	defer e.unlock()
	return e.lock().idleFor()
}

func (l *loop) idleFor() time.Duration {
	if l.settler.busy > 0 {
		return l.cfg.idle
	}
	if since := time.Since(l.fetcher.lastBusy); since < l.cfg.idle {
		return l.cfg.idle - since
	}
	l.log.Debug("queen: consume loop idle, stopping", "queue", l.cfg.queue, "group", l.cfg.group, "idle", l.cfg.idle)
	l.stop(nil)
	return 0
}

// beginStop is loop.stop for who does not hold the loop.
func (e *engine) beginStop(err error) {
	e.lock().stop(err)
	e.unlock()
}

// stopping says whether the loop is stopping, for the handlers too. It
// reads the ctxs itself rather than wait for run to notice: a message is
// not started after either has ended.
func (e *engine) stopping() bool {
	return e.life.stopped() || e.life.ended()
}

// loopTimer is a timer of run: c is nil while it is not armed.
type loopTimer struct {
	t *time.Timer
	c <-chan time.Time
}

func (t *loopTimer) set(d time.Duration) {
	t.stop()
	t.t = time.NewTimer(d)
	t.c = t.t.C
}

// fired disarms a timer whose channel delivered.
func (t *loopTimer) fired() { t.t, t.c = nil, nil }

func (t *loopTimer) stop() {
	if t.t != nil {
		t.t.Stop()
	}
	t.t, t.c = nil, nil
}
