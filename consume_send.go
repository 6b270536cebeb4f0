package queen

import (
	"context"
	"errors"
	"sync"
	"time"
)

// The sender: ONE goroutine sends the loop's acks, lease renewals and
// reads of the queue's retry settings (and tells OnLoopError what the
// owner found, so that no user code runs on the owner), each request one attempt (the
// loop's retries are the owner's, consume_broker.go). It runs each job the
// owner gives it on a goroutine of its own and hands it back answered, so
// that a renewal never waits behind an ack; the owner decides how many
// jobs are in flight (loop.act; for acks, consume_settle.go's flush) and
// reads a job only once it is back. When the owner closes sendc, the sender returns after the
// jobs in flight.

type jobKind uint8

const (
	jobAck jobKind = iota + 1
	jobRenew
	jobRule
	jobNote // an OnLoopError call the owner decided (a lost lease)
)

// job is one request of the sender and its answer. The owner fills the
// request, the sender the answer; parts and p are the owner's (the
// sender reads neither).
type job struct {
	kind jobKind
	at   time.Time // when the owner gave it to the sender
	err  error
	// goexit: a callback ended a goroutine of the job (runtime.Goexit);
	// what it did not answer is failed with errCallbackGoexit.
	goexit bool

	// jobAck: the acks as sent, the outcomes chosen, which were sent
	// before without an answer (nil: none), the parts they came from, and
	// the requests that carry them (a part's acks all in one request).
	acks, chosen []Settlement
	retried      []bool
	parts        []*part
	reqs         []ackReq

	// jobRenew: the lease, its extension, its pop's size.
	p       *pop
	leaseID string
	secs    int
	n       int
	alive   bool

	// jobRule: the failed message to read through (nil at the start).
	failed *Message
	rule   retryRule

	// jobNote: what OnLoopError is told.
	note *LoopError
}

// ackReq is one ack request of a job, acks[from:to], and its answer.
type ackReq struct {
	from, to int
	res      []AckResult
	err      error
	timedOut bool // the attempt ran out of time: it may have been applied
	done     bool // its goroutine ran to the end (not ended by runtime.Goexit)
}

// send is the sender goroutine.
func (e *engine) send() {
	var wg sync.WaitGroup
	defer wg.Wait()
	for j := range e.sendc {
		wg.Go(func() {
			answered := false
			defer func() {
				if !answered { // runtime.Goexit in a callback
					j.goexit = true
				}
				e.sentc <- j
			}()
			switch j.kind {
			case jobAck:
				e.sendAcks(j)
			case jobRenew:
				e.sendRenew(j)
			case jobRule:
				e.readRule(j)
			case jobNote:
				e.loopError(j.note)
			}
			answered = true
		})
	}
}

// sent takes a job's answer back on the owner.
func (l *loop) sent(j *job) {
	l.sending--
	if j.goexit {
		j.exited()
		l.stop(l.callbackGoexit("the sender"))
	}
	switch j.kind {
	case jobAck:
		l.acking--
		l.acked(j)
	case jobRenew:
		l.renewed(j)
	case jobRule:
		l.ruleRead(j)
	}
}

// readRule reads the queue's retry settings on the requests' ctx (which
// shutdown cancels), at the start also ended by Execute's (a stop).
func (e *engine) readRule(j *job) {
	ctx, cancel := context.WithTimeout(e.life.reqCtx, ruleTimeout)
	defer cancel()
	if j.failed == nil {
		defer context.AfterFunc(e.life.ctx, cancel)()
	}
	j.rule, j.err = e.b.retryRule(ctx, j.failed)
}

// exited fails what a job's goroutines left unanswered when a callback
// ended one of them (runtime.Goexit): an ack request with no answer, a
// renewal or a read of the settings.
func (j *job) exited() {
	switch j.kind {
	case jobAck:
		for i := range j.reqs {
			if r := &j.reqs[i]; !r.done && r.err == nil && r.res == nil {
				r.err = errCallbackGoexit
			}
		}
	case jobRenew, jobRule:
		if j.err == nil {
			j.err = errCallbackGoexit
		}
	}
}

// errCallbackGoexit: a user callback (OnLoopError, a hook) ended a
// fetcher's or the sender's goroutine (runtime.Goexit); the loop stops.
var errCallbackGoexit = errors.New("queen: a consume callback (OnLoopError or a hook) ended its goroutine (runtime.Goexit)")

// callbackGoexit says that a callback ended a goroutine of who
// (runtime.Goexit), and returns the error the loop stops with.
func (l *loop) callbackGoexit(who string) error {
	l.log.Error("queen: a callback on "+who+" of the consume loop ended its goroutine (runtime.Goexit); the loop stops",
		"queue", l.cfg.queue, "group", l.cfg.group)
	return errCallbackGoexit
}
