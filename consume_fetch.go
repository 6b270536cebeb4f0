package queen

import (
	"context"
	"errors"
	"time"

	"github.com/queen-go/queen/internal/transport"
)

// The fetcher decides when a pop goes, how big it is and whether it
// waits: only for a free handler, within the Limit, after any pause. A pop
// long-polls only when the loop holds nothing else; beside the loop's own
// pops it does not wait (the partitions it finds leased may be freed by
// the loop's next ack, which a waiting pop would notice late), and the
// first pops of several handlers do not wait either. Once such a pop
// finds nothing the loop is contended: each settle then lets one pop go,
// and a handler with none to use long-polls after brokerRecheck.
// docs/ARCHITECTURE.md (Fetch) tells why each rule is there.

// The pacing: each constant answers a behaviour of the broker.
const (
	// A broker that sizes a pop itself (autopilot) hands out at most this many.
	autopilotMaxBatch = 1000
	// A broker re-checks a waiting pop only now and then (0.15.1: after
	// 100 ms first): the pause after an empty answer, unless the broker
	// advises one (autopilot waitMs), and how long a contended loop waits
	// for a settle before it long-polls.
	brokerRecheck = 100 * time.Millisecond
	// An answer the broker has sent arrives within this (a local HTTP
	// answer, with margin): what a stop gives the pops in flight before it
	// abandons them, so that the messages of an answer on its way are
	// given back rather than left leased.
	answerOnItsWay = 250 * time.Millisecond
	// A broker notices an abandoned long poll (and claims nothing more for
	// it) within this: the acks held back at a stop wait for it.
	abandonNoticed = 100 * time.Millisecond
	// During an outage, at most one line per backoff step or this.
	outageLogEvery = 30 * time.Second
)

// fetcher is the pops' state: in flight, paced, within the Limit, through
// an outage, abandoned at a stop.
type fetcher struct {
	wake      wakeup    // fetchers waiting for a pop to go
	inflight  int       // pops in flight
	limit     limiter   // the Limit
	outage    outage    // failed pops in a row
	pauseTill time.Time // no pop before (after an empty answer or a failure)
	// The pacing of pops that do not wait (the top of this file).
	settled    uint64    // pops settled so far
	answered   bool      // a pop was answered (empty or not)
	flowing    bool      // the last answer brought messages
	contended  bool      // a pop that did not wait found nothing; pops go one per settle
	tokens     int       // settles not yet used by a pop, while contended
	fallbackAt time.Time // while contended with no token: a long poll may go after this
	lastBusy   time.Time // the last settle (or the start), for IdleMillis
	// The stop.
	abandoned bool      // pops in flight were abandoned at the stop
	quietAt   time.Time // when an abandoned pop is surely gone
}

func newFetcher(limit int) fetcher {
	return fetcher{wake: newWakeup(), limit: limiter{on: limit > 0, left: limit}, lastBusy: time.Now()}
}

// start readies the fetcher at the loop's start: the outage's backoff
// within the Client's retry policy.
func (f *fetcher) start(p RetryPolicy) { f.outage = outage{backoff: newRetryBackoff(p)} }

// popDone is a pop that came back: its reservation from the Limit, and
// what it brought.
type popDone struct {
	reserved  int
	nowait    bool
	settledAt uint64 // fetcher.settled when it went
	res       *popResult
	err       error
	took      time.Duration
}

// fetch sends the pop of t, for at most t.n messages (0: the builder's
// batch), and hands an answer with messages to the scheduler, which
// handles its first group on this goroutine.
func (e *engine) fetch(t task, s *slot) {
	began := time.Now()
	res, err := e.b.pop(e.life.pollCtx, t.n, t.nowait)
	if e.answered(popDone{reserved: t.n, nowait: t.nowait, settledAt: t.settledAt, res: res, err: err, took: time.Since(began)}) {
		e.dispatch(res, t.n, s)
	}
}

// answered takes a pop's answer: the pacing, the Limit, the outage. It
// says whether the answer brought messages, for dispatch; that pop stays
// counted in flight until dispatch has its groups.
func (e *engine) answered(d popDone) (messages bool) {
	got := 0
	if d.res != nil {
		got = len(d.res.messages)
	}
	stopped := e.lock().answered(d, got)
	e.unlock()
	if d.err != nil && !stopped {
		e.loopError(&LoopError{Op: LoopOpPop, Err: d.err})
	}
	return got > 0
}

// answered is engine.answered's part under the loop; stopped: the answer
// came after the stop.
func (l *loop) answered(d popDone, got int) (stopped bool) {
	f := &l.fetcher
	stopped = l.phase != running
	if n, since := f.answer(d, got, stopped); n > 0 {
		// The outage's end, at the level of its start, so that a logger
		// that shows the outage shows its end.
		l.log.Warn("queen: pops succeed again", "queue", l.cfg.queue, "group", l.cfg.group,
			"failures", n, "after", time.Since(since).Round(time.Millisecond))
	}
	switch {
	case got > 0:
		return stopped // dispatched's turn
	case stopped:
		if f.inflight == 0 {
			f.abandon(l.life.pollCancel) // the last pop is back: nothing to wait for
		}
	case d.err != nil:
		l.popFailed(d.err)
	}
	l.changed()
	return stopped
}

// answer records a pop's answer (got messages), and ends the outage, if
// one ran, after a pop that succeeded: failures says how many pops failed
// in it, since when (0: there was none). A pop with messages stays in
// flight (landed ends it).
func (f *fetcher) answer(d popDone, got int, stopped bool) (failures int, since time.Time) {
	f.limit.popped(d.reserved, got)
	if got == 0 {
		f.inflight--
	}
	if stopped || d.err != nil {
		return 0, time.Time{}
	}
	failures, since = f.outage.recovered()
	f.answered = true
	switch {
	case got == 0 && d.nowait:
		if !f.contended {
			f.contended, f.tokens = true, 0
		}
		if f.settled != d.settledAt {
			f.tokens = max(f.tokens, 1) // a settle while it was on its way may have freed a partition
		}
		f.fallbackAt = time.Now().Add(emptyDelay(d.res, 0))
	case got == 0:
		f.flowing = false // a long poll found nothing: the queue is empty
		f.pauseTill = time.Now().Add(emptyDelay(d.res, d.took))
	default:
		f.flowing = true
		f.pauseTill = time.Time{}
	}
	return failures, since
}

// landed ends the flight of a pop whose groups the scheduler has; full:
// no handler is left idle, so there is nothing to pace.
func (f *fetcher) landed(full bool) {
	f.inflight--
	if full {
		f.contended = false
	}
}

// takePop gives a fetcher a pop to send, if one may go: only
// for a free handler (pops in flight, groups waiting and running and pops
// being settled stay below Concurrency, which bounds what the loop holds
// to Concurrency pops), and while the pops in flight and not yet settled,
// those held for retryDelay included (holdFailed), stay below twice
// Concurrency: a held pop occupies no handler, but it is not settled, and
// so the loop holds at most 2×Concurrency pops however many of them wait
// for retryDelay (without a hold, the first bound is the one that binds);
// after any pause, within the Limit.
func (l *loop) takePop() (task, bool) {
	if l.phase != running || l.fetcher.inflight+l.settler.busy >= 2*l.cfg.slots {
		return task{}, false
	}
	return l.fetcher.take(time.Now(), l.inHand(), l.cfg.slots, l.cfg.want)
}

// take is takePop's pacing and Limit (inHand: what the loop holds past the
// answers).
func (f *fetcher) take(now time.Time, inHand, slots, want int) (task, bool) {
	if f.inflight+inHand >= slots || now.Before(f.pauseTill) {
		return task{}, false
	}
	goes, nowait := f.paced(now, inHand, slots)
	if !goes {
		return task{}, false
	}
	n, ok := f.limit.reserve(want)
	if !ok {
		if nowait && f.contended {
			f.tokens++ // the settle stays unused
		}
		return task{}, false
	}
	f.inflight++
	return task{pop: true, n: n, nowait: nowait, settledAt: f.settled}, true
}

// paced says how the next pop may go (see the top of this file): go
// false, the fetcher waits (for a settle, or until wakeAt); nowait, a pop
// that does not wait. A pop that goes while contended uses a settle
// (tokens).
func (f *fetcher) paced(now time.Time, inHand, slots int) (goes, nowait bool) {
	held := inHand > 0 || (f.inflight > 0 && f.flowing)
	switch {
	case !held && !f.answered && slots > 1:
		return true, true // the first pops: see the top of this file
	case !held:
		return true, false
	case !f.contended:
		return true, true
	case f.tokens > 0:
		f.tokens--
		return true, true
	case !now.Before(f.fallbackAt):
		return true, false
	}
	return false, false
}

// wakeAt is when a fetcher with nothing to do looks again by itself: the
// end of a pause, or when a contended loop may long-poll.
func (f *fetcher) wakeAt() time.Time {
	if f.contended && f.tokens == 0 && f.fallbackAt.After(f.pauseTill) {
		return f.fallbackAt
	}
	return f.pauseTill
}

// onSettle counts a settled pop of n messages, used of them handled: a
// partition may be free again (one more pop may go while contended), the
// Limit gets back what was not handled. It says whether the Limit is
// reached.
func (f *fetcher) onSettle(n, used, slots int) bool {
	f.settled++
	if f.contended {
		f.tokens = min(f.tokens+1, slots)
		f.fallbackAt = time.Now().Add(brokerRecheck)
	}
	f.lastBusy = time.Now()
	f.limit.settled(n, used)
	return f.limit.reached()
}

// abandon cancels the pops still in flight, once: after answerOnItsWay,
// or as soon as none is in flight (cancel is the pops' ctx's). The broker
// claims nothing more for a poll that is gone, once it has noticed: quiet
// waits abandonNoticed for that. It says whether pops were abandoned now.
func (f *fetcher) abandon(cancel context.CancelFunc) bool {
	if !f.quietAt.IsZero() {
		return false // done before
	}
	f.quietAt = time.Now()
	if f.inflight > 0 {
		f.abandoned = true
		f.quietAt = f.quietAt.Add(abandonNoticed)
	}
	cancel()
	return f.abandoned
}

// quiet says whether, after a stop, no pop of the loop can still claim
// messages at the broker (pollCtx: the pops').
func (f *fetcher) quiet(pollCtx context.Context) bool {
	return f.inflight == 0 && pollCtx.Err() != nil && (!f.abandoned || !time.Now().Before(f.quietAt))
}

// failed pauses the pops after a failure for the outage's backoff; it
// returns the pause, and whether to log this failure.
func (f *fetcher) failed(err error) (time.Duration, bool) {
	now := time.Now()
	d, say := f.outage.failed(err, now)
	f.pauseTill = now.Add(d)
	return d, say
}

// limiter counts the Limit: left is what no pop has asked for yet, held
// what pops asked for and did not settle. A message counts when its
// handler got it; one given back (never started, or the rest of a failed
// partition) counts again.
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

// settled ends the hold of a settled pop of n messages, used of them
// handled; the rest counts again.
func (l *limiter) settled(n, used int) {
	if l.on {
		l.held -= n
		l.left += n - used
	}
}

// reached says whether the Limit is all handled and settled.
func (l *limiter) reached() bool { return l.on && l.left <= 0 && l.held == 0 }

// emptyDelay is the pause after an empty answer, so that pops that do not
// wait (Wait(false), discovery, a broker that answers at once) do not spin:
// the broker's own advice when it gives one, less the time the pop took.
func emptyDelay(res *popResult, took time.Duration) time.Duration {
	d := brokerRecheck
	if res.autopilot != nil && res.autopilot.WaitMs != nil && *res.autopilot.WaitMs >= 0 {
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

// retryableStatus says whether a broker's answer of that status may change
// if the request is sent again: the client's one rule, transport.Retryable.
func retryableStatus(status int) bool { return transport.Retryable(status) }

// outage follows a run of failed pops: the pause before the next one
// (retryBackoff), and what to say about it. Loud but bounded: a Warn at
// the first failure, then a line only when the backoff grows or
// outageLogEvery passed, and a Warn when a pop succeeds again.
type outage struct {
	backoff retryBackoff
	since   time.Time
	logged  time.Time // last line
}

// failed records a failed pop at now and returns the pause before the next
// one, and whether to log this failure.
func (o *outage) failed(err error, now time.Time) (time.Duration, bool) {
	d := o.backoff.failed(err)
	if o.backoff.failures == 1 {
		o.since = now
	}
	say := o.backoff.grew() || now.Sub(o.logged) >= outageLogEvery
	if say {
		o.logged = now
	}
	return d, say
}

// recovered ends an outage; it returns how many pops failed and since when
// (0: there was none).
func (o *outage) recovered() (int, time.Time) { return o.backoff.reset(), o.since }

// popFailed handles a failed pop: a refusal for good stops the loop with
// it; anything else pauses the pops for a backoff, loudly.
func (l *loop) popFailed(err error) {
	if !fatalPopError(err) {
		if d, say := l.fetcher.failed(err); say {
			l.log.Warn("queen: pop failed; the loop backs off and pops again", "queue", l.cfg.queue, "group", l.cfg.group,
				"err", err, "failures", l.fetcher.outage.backoff.failures, "backoff", d)
		}
		return
	}
	l.log.Error("queen: consume loop stopped by the broker's refusal", "queue", l.cfg.queue, "group", l.cfg.group, "err", err)
	l.stop(err)
}

// loopError hands err to the OnLoopError hook, if any; a panic in the hook
// is logged, never the loop's end.
func (e *engine) loopError(err *LoopError) {
	f := e.on.onLoopError
	if f == nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			e.log.Error("queen: OnLoopError hook panicked", "panic", v)
		}
	}()
	f(e.life.reqCtx, err)
}
