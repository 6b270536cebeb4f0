package queen

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/queen-go/queen/internal/transport"
)

// Fetch: the owner decides when a pop goes, how big it is and whether it
// waits (the fetcher's state below); fetcher goroutines only send the
// pops it orders and hand back the answers. A pop goes only for a free
// handler, within the Limit, after any pause. It long-polls only when the
// loop holds nothing else; beside the loop's own pops it does not wait
// (the partitions it finds leased may be freed by the loop's next ack,
// which a waiting pop would notice late), and the first pops of several
// handlers do not wait either. Once such a pop finds nothing the loop is
// contended: each partition the loop frees (the answer to its last ack)
// then lets one pop go, and a handler with none to use long-polls after
// brokerRecheck. docs/ARCHITECTURE.md (Fetch) tells why each rule is there.

// The pacing: each constant answers a behaviour of the broker.
const (
	// A broker that sizes a pop itself (autopilot) hands out at most this many.
	autopilotMaxBatch = 1000
	// A broker re-checks a waiting pop only now and then (0.15.1: after
	// 100 ms first): the pause after an empty answer, unless the broker
	// advises one (autopilot waitMs), and how long a contended loop waits
	// for a freed partition before it long-polls.
	brokerRecheck = 100 * time.Millisecond
	// An answer the broker has sent arrives within this (a local HTTP
	// answer, with margin): what a stop gives the pops in flight before it
	// abandons them, so that the messages of an answer on its way are
	// given back rather than left leased.
	answerOnItsWay = 250 * time.Millisecond
	// A broker notices an abandoned long poll (and claims nothing more for
	// it) within this: the acks held back at a stop wait for it.
	abandonNoticed = 100 * time.Millisecond
	// During an outage of pops, a Warn again after this (the rest at Debug).
	outageLogEvery = 30 * time.Second
)

// popOrder is a pop the owner orders: at most n messages (0: the
// builder's batch), waiting or not.
type popOrder struct {
	n         int
	nowait    bool
	fallback  bool   // a long poll (fetcher.parked)
	settledAt uint64 // fetcher.settled when it went
}

// popAnswer is a fetcher's report of a pop.
type popAnswer struct {
	order popOrder
	res   *popResult
	err   error
	took  time.Duration
	// goexit: a callback ended the fetcher's goroutine (runtime.Goexit).
	goexit bool
}

// fetch is a fetcher goroutine: it sends the pops the owner orders, one
// at a time, and reports each answer. A failed pop goes to OnLoopError
// here, not on the owner. Should a hook or OnLoopError end the goroutine
// (runtime.Goexit, as t.FailNow does), the fetcher reports its pop as
// such and is gone: the loop stops.
func (e *engine) fetch() {
	var a *popAnswer // the pop on its way
	defer func() {
		if a != nil { // runtime.Goexit in a callback
			a.goexit = true
			if a.err == nil && a.res == nil {
				a.err = errCallbackGoexit
			}
			e.popc <- *a
		}
	}()
	for o := range e.popOrders {
		began := time.Now()
		a = &popAnswer{order: o}
		a.res, a.err = e.b.pop(e.life.pollCtx, o.n, o.nowait)
		a.took = time.Since(began)
		if a.err != nil && !e.life.stopped() {
			e.loopError(&LoopError{Op: LoopOpPop, Err: a.err})
		}
		e.popc <- *a
		a = nil
	}
}

// fetcher is the pops' state: in flight, paced, within the Limit, through
// an outage, abandoned at a stop.
type fetcher struct {
	inflight  int       // pops in flight
	limit     limiter   // the Limit
	outage    outage    // failed pops in a row
	pauseTill time.Time // no pop before (after an empty answer or a failure)
	// The pacing of pops that do not wait (the top of this file).
	settled    uint64    // partitions freed so far
	answered   bool      // a pop was answered (empty or not)
	flowing    bool      // the last answer brought messages
	contended  bool      // a pop that did not wait found nothing; pops go one per freed partition
	tokens     int       // freed partitions not yet used by a pop, while contended
	fallbackAt time.Time // while contended with no token: a long poll may go after this
	parked     int       // long polls in flight (at most one)
	// The stop.
	abandoned bool      // pops in flight were abandoned at the stop
	quietAt   time.Time // when an abandoned pop is surely gone
}

func newFetcher(limit int) fetcher {
	return fetcher{limit: limiter{on: limit > 0, left: limit}}
}

// start readies the fetcher at the loop's start: the outage's backoff
// within the Client's retry policy.
func (f *fetcher) start(p RetryPolicy) { f.outage = outage{backoff: newRetryBackoff(p)} }

// canPop says whether a pop may go as far as the loop's bounds go (the
// pacing aside): running, the queue's settings read, and fewer than
// twice Concurrency pops in flight or in hand (parts waiting for a retry
// occupy no handler, but their pops count here).
func (l *loop) canPop() bool {
	return l.phase == running && !l.rules.starting && l.fetcher.inflight+len(l.pops) < 2*l.cfg.slots
}

// inHand is how many parts occupy a handler: waiting for one, running, or
// done and waiting for the answer to their last ack (which frees their
// partition). With the pops in flight it is held below Concurrency, so
// that the loop never handles more than Concurrency pops at once.
func (l *loop) inHand() int { return l.occupying }

// popMore orders the pops that may go now.
func (l *loop) popMore(now time.Time) {
	for l.canPop() {
		o, ok := l.fetcher.take(now, l.inHand(), l.cfg.slots, l.cfg.want)
		if !ok {
			return
		}
		l.e.popOrders <- o
	}
}

// take is popMore's pacing and Limit (inHand: the parts occupying a
// handler).
func (f *fetcher) take(now time.Time, inHand, slots, want int) (popOrder, bool) {
	if f.inflight+inHand >= slots || now.Before(f.pauseTill) {
		return popOrder{}, false
	}
	parked := f.parked
	goes, nowait := f.paced(now, inHand, slots)
	if !goes {
		return popOrder{}, false
	}
	fallback := f.parked > parked
	n, ok := f.limit.reserve(want)
	if !ok {
		if nowait && f.contended {
			f.tokens++ // the freed partition stays unused
		}
		if fallback {
			f.parked--
		}
		return popOrder{}, false
	}
	f.inflight++
	return popOrder{n: n, nowait: nowait, fallback: fallback, settledAt: f.settled}, true
}

// paced says how the next pop may go (see the top of this file): go
// false, it waits (for a freed partition, or until wakeAt); nowait, a pop
// that does not wait. A pop that goes while contended uses a token.
func (f *fetcher) paced(now time.Time, inHand, slots int) (goes, nowait bool) {
	held := inHand > 0 || (f.inflight > 0 && f.flowing)
	switch {
	case !held && !f.answered && slots > 1:
		return true, true // the first pops: see the top of this file
	case f.contended && f.tokens > 0:
		f.tokens-- // a partition the loop freed: its pop goes, beside a parked one
		return true, true
	case !held:
		// One long poll at a time: parked at the broker it holds a
		// handler, and the first answer with messages lets the
		// others go.
		if f.parked > 0 {
			return false, false
		}
		f.parked++
		return true, false
	case !f.contended:
		return true, true
	case f.parked == 0 && !now.Before(f.fallbackAt):
		// One at a time: parked at the broker, a long poll holds a
		// handler, and a partition the loop frees then needs a free one
		// for its pop (a waiting pop notices it only at the broker's
		// next re-check).
		f.parked++
		return true, false
	}
	return false, false
}

// wakeAt is when a pop held back by the pacing may go by itself: the end
// of a pause, or when a contended loop may long-poll.
func (f *fetcher) wakeAt() time.Time {
	if f.contended && f.tokens == 0 && f.parked == 0 && f.fallbackAt.After(f.pauseTill) {
		return f.fallbackAt
	}
	return f.pauseTill
}

// answered takes a pop's answer: the pacing, the Limit, the outage, then
// dispatch. An answer that comes after the stop is given back whole. It
// returns why the answer stops the loop (nil: it does not), a refusal for
// good or a callback's Goexit: the owner's run stops it.
func (l *loop) answered(a popAnswer) (stop error) {
	f := &l.fetcher
	got := 0
	if a.res != nil {
		got = len(a.res.messages)
	}
	f.inflight--
	if a.order.fallback {
		f.parked--
	}
	stopped := l.phase != running
	if n, since := f.answer(a, got, stopped); n > 0 {
		// The outage's end, at the level of its start, so that a logger
		// that shows the outage shows its end.
		l.log.Warn("queen: pops succeed again", "queue", l.cfg.queue, "group", l.cfg.group,
			"failures", n, "after", time.Since(since).Round(time.Millisecond))
	}
	switch {
	case got > 0:
		if l.dispatched(a.res) {
			f.landed(f.inflight+l.inHand() > l.cfg.slots) // no handler idle: nothing to pace
		}
	case a.err != nil && !stopped:
		stop = l.popFailed(a.err)
	}
	if a.goexit {
		if err := l.callbackGoexit("a fetcher"); stop == nil {
			stop = err
		}
	}
	if l.phase != running && f.inflight == 0 {
		f.abandon(l.life.pollCancel) // the last pop is back: nothing to wait for
	}
	return stop
}

// answer records a pop's answer (got messages), and ends the outage, if
// one ran, after a pop that succeeded: failures says how many pops failed
// in it, since when (0: there was none).
func (f *fetcher) answer(a popAnswer, got int, stopped bool) (failures int, since time.Time) {
	f.limit.popped(a.order.n, got)
	if stopped || a.err != nil {
		return 0, time.Time{}
	}
	failures, since = f.outage.recovered()
	f.answered = true
	switch {
	case got == 0 && a.order.nowait:
		if !f.contended {
			f.contended, f.tokens = true, 0
		}
		if f.settled != a.order.settledAt {
			f.tokens = max(f.tokens, 1) // a partition freed while it was on its way may be free
		}
		f.fallbackAt = time.Now().Add(emptyDelay(a.res, 0))
	case got == 0:
		f.flowing = false // a long poll found nothing: the queue is empty
		f.pauseTill = time.Now().Add(emptyDelay(a.res, a.took))
	default:
		f.flowing = true
		f.pauseTill = time.Time{}
	}
	return failures, since
}

// landed notes a pop whose parts are in hand; full: no handler is left
// idle, so there is nothing to pace.
func (f *fetcher) landed(full bool) {
	if full {
		f.contended = false
	}
}

// freed counts a partition the loop freed (the answer to its last ack):
// one more pop may go while contended, and the long poll of the handlers
// left waiting is put off.
func (f *fetcher) freed(slots int) {
	f.settled++
	if f.contended {
		f.tokens = min(f.tokens+1, slots)
		f.fallbackAt = time.Now().Add(brokerRecheck)
	}
}

// abandon cancels the pops still in flight, once: after answerOnItsWay,
// or as soon as none is in flight (cancel is the pops' ctx's). The broker
// claims nothing more for a poll that is gone, once it has noticed: quiet
// waits abandonNoticed for that.
func (f *fetcher) abandon(cancel context.CancelFunc) {
	if !f.quietAt.IsZero() {
		return // done before
	}
	f.quietAt = time.Now()
	if f.inflight > 0 {
		f.abandoned = true
		f.quietAt = f.quietAt.Add(abandonNoticed)
	}
	cancel()
}

// quiet says whether, after a stop, no pop of the loop can still claim
// messages at the broker (pollCtx: the pops').
func (f *fetcher) quiet(pollCtx context.Context, now time.Time) bool {
	return f.inflight == 0 && pollCtx.Err() != nil && (!f.abandoned || !now.Before(f.quietAt))
}

// failed pauses the pops after a failure for the outage's backoff; it
// returns the pause, and whether to log this failure.
func (f *fetcher) failed(err error) (time.Duration, bool) {
	now := time.Now()
	d, say := f.outage.failed(err, now)
	f.pauseTill = now.Add(d)
	return d, say
}

// limiter counts the Limit in handler calls: left is what no pop has
// asked for (nor a retry taken) yet, held what the pops in hand took. A
// message counts when the handler is called with it, each call once (a
// retry in place is a call); one given back without a call counts again.
// The Limit is reached when it is all called and settled.
type limiter struct {
	on   bool
	left int
	held int
}

// reserve takes the batch of the next pop: at most want, and the whole
// remainder when that is less. No more than one pop asks for a remainder
// smaller than a batch: its messages would come from the same last
// partitions, and small pops for them, served one after another by the
// broker, would cost more than one pop of them all. ok false: nothing left
// to ask for now (pops in flight may still give some back). n is 0 (the
// builder's batch) without a Limit.
func (l *limiter) reserve(want int) (n int, ok bool) {
	if !l.on {
		return 0, true
	}
	if l.left <= 0 {
		return 0, false
	}
	n = min(l.left, want)
	l.left -= n
	l.held += n
	return n, true
}

// popped returns to the Limit what a pop asked for and did not get.
func (l *limiter) popped(reserved, got int) {
	if l.on {
		l.held -= reserved - got
		l.left += reserved - got
	}
}

// take takes one call more for a retry in place; false: none is left.
func (l *limiter) take() bool {
	if !l.on {
		return true
	}
	if l.left <= 0 {
		return false
	}
	l.left--
	l.held++
	return true
}

// settled ends the hold of a settled pop of n units, used of them
// called; the rest counts again.
func (l *limiter) settled(n, used int) {
	if l.on {
		l.held -= n
		l.left += n - used
	}
}

// reached says whether the Limit is all called and settled.
func (l *limiter) reached() bool { return l.on && l.left <= 0 && l.held == 0 }

// emptyDelay is the pause after an empty answer, so that pops that do not
// wait (Wait(false), discovery, a broker that answers at once) do not spin:
// the broker's own advice when it gives one, less the time the pop took.
func emptyDelay(res *popResult, took time.Duration) time.Duration {
	d := brokerRecheck
	if res != nil && res.autopilot != nil && res.autopilot.WaitMs != nil && *res.autopilot.WaitMs >= 0 {
		d = time.Duration(*res.autopilot.WaitMs) * time.Millisecond
	}
	return d - took
}

// fatalPopError says whether a pop error ends the loop: a refusal that
// asking again cannot change (401, 403, a queue that does not exist, a
// malformed request, a closed client, a broker without conflation).
func fatalPopError(err error) bool {
	if errors.Is(err, ErrClosed) || errors.Is(err, ErrConflationUnsupported) || errors.Is(err, ErrInvalidArgument) {
		return true
	}
	var be *BrokerError
	if errors.As(err, &be) {
		return be.Status >= 400 && !retryableStatus(be.Status)
	}
	return !transport.RetryableErr(err) // e.g. an untrusted TLS certificate
}

// outage follows a run of failed pops: the pause before the next one
// (retryBackoff), and what to say about it. A Warn at the first failure,
// then a Warn only each outageLogEvery (the failures between at Debug),
// and a Warn when a pop succeeds again.
type outage struct {
	backoff retryBackoff
	since   time.Time
	logged  time.Time // last line
}

// failed records a failed pop at now and returns the pause before the next
// one, and whether this failure is worth a Warn (else a Debug line).
func (o *outage) failed(err error, now time.Time) (time.Duration, bool) {
	d := o.backoff.failed(err)
	if o.backoff.failures == 1 {
		o.since = now
	}
	warn := o.backoff.failures == 1 || now.Sub(o.logged) >= outageLogEvery
	if warn {
		o.logged = now
	}
	return d, warn
}

// recovered ends an outage; it returns how many pops failed and since when
// (0: there was none).
func (o *outage) recovered() (int, time.Time) { return o.backoff.reset(), o.since }

// popFailed handles a failed pop: a refusal for good is returned, to stop
// the loop with it; anything else pauses the pops for a backoff, loudly
// (nil).
func (l *loop) popFailed(err error) (fatal error) {
	if !fatalPopError(err) {
		level := slog.LevelDebug
		d, warn := l.fetcher.failed(err)
		if warn {
			level = slog.LevelWarn
		}
		l.log.Log(context.Background(), level, "queen: pop failed; the loop backs off and pops again", "queue", l.cfg.queue, "group", l.cfg.group,
			"err", err, "failures", l.fetcher.outage.backoff.failures, "backoff", d)
		return nil
	}
	l.log.Error("queen: consume loop stopped by the broker's refusal", "queue", l.cfg.queue, "group", l.cfg.group, "err", err)
	return err
}
