package queen

import (
	"context"
	"errors"
	"time"

	"github.com/queen-go/queen/internal/transport"
)

// The fetcher: what decides when a pop goes, how big it is, and whether
// it waits. A fetcher goroutine of the loop (consume_loop.go) sends a pop
// when a handler is free for it (fewer pops in flight, groups waiting or
// running and pops being settled than slots), when no pause runs (after an
// empty answer or a failure), and when the Limit has some left; the answer
// goes back to the loop as a popDone.
//
// A pop waits for messages (a long poll, unless Wait(false)) when the loop
// holds nothing else. While it holds other pops (being handled or settled,
// or in flight while pops bring messages), a pop does not wait: the
// partitions it finds leased may be the loop's own, freed by its next ack
// (or by the ack of a pop still on its way), and a broker re-checks a
// waiting pop only now and then (0.15.1: after 100 ms, backing off to 1 s),
// so a waiting pop could sit out an ack that came milliseconds later.
//
// The first pops of a loop of several handlers do not wait either, until
// one is answered: handlers that all long-polled a queue with fewer free
// partitions than handlers would leave the losers parked at the broker,
// each holding its share of the Limit until the broker's next look. An
// empty queue costs each handler one pop more before its long poll.
//
// When such a pop finds nothing, the loop is contended (more handlers than
// partitions it can get): from then on each settle of the loop lets one
// pop go (a settle frees at most the partitions of one pop), not one per
// free handler, so that a loop with more handlers than partitions does not
// send a pop per idle handler at every ack. A handler with no settle to
// use waits; if no settle comes within the usual pause after an empty
// answer (the loop's handlers may be slow), its pop waits at the broker
// (one long poll, not a pop every pause). The loop is no longer contended once an
// answer leaves no handler idle, or a long poll answers.

const (
	autopilotMaxBatch = 1000                   // the most messages a broker hands out when it sizes a pop
	emptyPollDelay    = 100 * time.Millisecond // the pause after an empty answer, unless the broker says
	popBackoffMin     = 50 * time.Millisecond  // the first pause after a failed pop
	popBackoffMax     = 200 * time.Millisecond // the longest: a loop resumes within about 0.2 s of a broker restart
	outageLogEvery    = 30 * time.Second       // during an outage, at most one line per backoff step or this
)

// popDone is a pop that came back: its reservation from the Limit, and
// what it brought.
type popDone struct {
	reserved  int
	nowait    bool
	settledAt uint64 // e.settled when it went
	res       *popResult
	err       error
	took      time.Duration
}

// fetch sends the pop of t, for at most t.n messages (0: the builder's
// batch), on a fetcher, and hands the answer to the loop; it returns the group the
// fetcher is to handle itself, if any.
func (e *engine) fetch(t task) *group {
	began := time.Now()
	res, err := e.b.pop(e.pollCtx, t.n, t.nowait)
	return e.popped(popDone{reserved: t.n, nowait: t.nowait, settledAt: t.settledAt, res: res, err: err, took: time.Since(began)})
}

// paced says how the next pop may go (e.mu held; see the top of this
// file): go false, the fetcher waits (for a settle, or until wakeAt);
// nowait, a pop that does not wait. A pop that goes while contended uses a
// settle (tokens).
func (e *engine) paced(now time.Time) (goes, nowait bool) {
	held := e.inHand() > 0 || (e.inflight > 0 && e.flowing)
	switch {
	case !held && !e.answered && e.cfg.slots > 1:
		return true, true // the first pops: see the top of this file
	case !held:
		return true, false
	case !e.contended:
		return true, true
	case e.tokens > 0:
		e.tokens--
		return true, true
	case !now.Before(e.fallbackAt):
		return true, false
	}
	return false, false
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
	d := emptyPollDelay
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

// outage follows a run of failed pops: the backoff before the next one,
// and what to say about it. Loud but bounded: a Warn at the first failure,
// then a line only when the backoff grows or outageLogEvery passed, and a
// Warn when a pop succeeds again.
type outage struct {
	lo, hi   time.Duration // backoff bounds
	failures int
	since    time.Time
	backoff  time.Duration
	logged   time.Time // last line
}

func newOutage(p RetryPolicy) outage {
	o := outage{lo: popBackoffMin, hi: popBackoffMax}
	if p.MinBackoff > 0 {
		o.lo = min(p.MinBackoff, popBackoffMax)
	}
	if p.MaxBackoff > 0 {
		o.hi = min(p.MaxBackoff, popBackoffMax)
	}
	o.hi = max(o.hi, o.lo)
	return o
}

// failed records a failed pop at now and returns the pause before the next
// one, and whether to log this failure.
func (o *outage) failed(err error, now time.Time) (time.Duration, bool) {
	prev := o.backoff
	o.failures++
	if o.failures == 1 {
		o.since = now
		o.backoff = o.lo
	} else {
		o.backoff = min(o.backoff*2, o.hi)
	}
	d := transport.Backoff(o.lo, o.hi, o.failures-1, retryAfterOf(err)) // the client's one backoff
	say := o.failures == 1 || o.backoff != prev || now.Sub(o.logged) >= outageLogEvery
	if say {
		o.logged = now
	}
	return d, say
}

// recovered ends an outage; it returns how many pops failed and since when
// (0: there was none).
func (o *outage) recovered() (int, time.Time) {
	n, since := o.failures, o.since
	o.failures, o.backoff = 0, 0
	return n, since
}

// popFailed handles a failed pop (e.mu held): a refusal for good stops
// the loop with it; anything else pauses the pops for a backoff, loudly.
func (e *engine) popFailed(err error) {
	if fatalPopError(err) {
		e.log.Error("queen: consume loop stopped by the broker's refusal", "queue", e.cfg.queue, "group", e.cfg.group, "err", err)
		e.stopLocked(err)
		return
	}
	now := time.Now()
	d, say := e.outage.failed(err, now)
	if say {
		e.log.Warn("queen: pop failed; the loop backs off and pops again", "queue", e.cfg.queue, "group", e.cfg.group,
			"err", err, "failures", e.outage.failures, "backoff", d)
	}
	e.pause(now.Add(d))
}

// popOK ends an outage, if one was running, with a line at the level of
// its start, Warn, so that a logger that shows the outage shows its end
// (e.mu held).
func (e *engine) popOK() {
	if n, since := e.outage.recovered(); n > 0 {
		e.log.Warn("queen: pops succeed again", "queue", e.cfg.queue, "group", e.cfg.group,
			"failures", n, "after", time.Since(since).Round(time.Millisecond))
	}
}

// loopError hands err to the OnLoopError hook, if any; a panic in the hook
// is logged, never the loop's end.
func (e *engine) loopError(err *LoopError) {
	f := e.onLoopError
	if f == nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			e.log.Error("queen: OnLoopError hook panicked", "panic", v)
		}
	}()
	f(e.reqCtx, err)
}

// ctxDone is a nil-safe ctx.Done.
func ctxDone(ctx context.Context) <-chan struct{} {
	if ctx == nil {
		return nil
	}
	return ctx.Done()
}
