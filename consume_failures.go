package queen

import (
	"errors"
	"slices"
	"strconv"
	"time"
)

// Retries where they failed: the loop, not the broker, counts each
// message's failures and decides what a failure does. Both broker
// generations count failed acks per partition and consumer group, charged
// across the leases that end unfinished (PROTOCOL.md §4.1, §17), and 2.x
// applies no retryDelay (§19); so the loop keeps a failed message where
// it failed: its partition stays leased (renewed by the loop, RenewLease
// or not), nothing after it is handled, and after the queue's retryDelay
// the handler is called again with it, up to retryLimit retries; the
// failure past them dead-letters it (dlq, with the error) and the
// partition goes on. Another worker never sees it in between. A stop
// gives it back (retry) with its count kept in this loop only.
//
// When the queue's settings cannot be read, a failure is acked failed
// (with the rest of its partition given back) and the broker counts. A
// batch handler's failure (ConsumeBatch without Each()) charges each
// partition's first message of the batch and gives the batch back after
// retryDelay (the whole call cannot be retried per message).

// retryRule is the part of a queue's configuration the loop's count needs.
// known false: the configuration could not be read, and failures are sent
// as `failed` for the broker to count (its per-partition rule).
type retryRule struct {
	known  bool
	limit  int           // retryLimit: failures a message may have before the one that dead-letters it
	delay  time.Duration // retryDelay: how long a failed message waits before it is handled again
	lease  time.Duration // leaseTime (0: unknown)
	dlqOff bool          // a queue whose dead-letter queue is off (2.x): the broker drops what it would dead-letter
}

// failureKey names one message across its deliveries.
type failureKey struct{ partition, txn string }

func keyOf(m *Message) failureKey { return failureKey{m.PartitionID, m.TransactionID} }

// maxCountedFailures bounds what a failureCounter remembers: a message
// given back after a failure and then taken by another process is never
// seen again by this loop, and its count would otherwise stay for ever.
// Past the bound the oldest counts are forgotten (such a message starts
// again from zero here).
const maxCountedFailures = 10_000

// failureCounter counts the failures of each message a consume loop has
// seen fail and not yet seen settled for good (completed, or
// dead-lettered: its dlq ack answered, so that a message whose dlq ack
// failed comes back with its count). The owner's alone. The zero value is not usable: make
// one with newFailureCounter.
type failureCounter struct {
	max   int
	n     map[failureKey]int
	order []failureKey // first failures in order, for the bound (may hold forgotten keys)
}

func newFailureCounter(max int) *failureCounter {
	return &failureCounter{max: max, n: map[failureKey]int{}}
}

// failed records one more failure of m and returns how many m has had.
func (fc *failureCounter) failed(m *Message) int {
	k := keyOf(m)
	c, ok := fc.n[k]
	if !ok {
		fc.order = append(fc.order, k)
		fc.bound()
	}
	c++
	fc.n[k] = c
	return c
}

// done forgets m: it was completed or dead-lettered.
func (fc *failureCounter) done(m *Message) {
	if len(fc.n) == 0 {
		return
	}
	delete(fc.n, keyOf(m))
	if len(fc.order) > 2*fc.max && len(fc.order) > 2*len(fc.n) {
		fc.compact()
	}
}

// count returns how many failures of m the counter holds.
func (fc *failureCounter) count(m *Message) int {
	return fc.n[keyOf(m)]
}

// size returns how many messages the counter holds a count for.
func (fc *failureCounter) size() int {
	return len(fc.n)
}

// bound forgets the oldest counts past max.
func (fc *failureCounter) bound() {
	for len(fc.n) >= fc.max && len(fc.order) > 0 {
		delete(fc.n, fc.order[0])
		fc.order = fc.order[1:]
	}
	if len(fc.order) > 2*fc.max {
		fc.compact()
	}
}

// compact drops the keys of order that were forgotten.
func (fc *failureCounter) compact() {
	kept := make([]failureKey, 0, len(fc.n))
	for _, k := range fc.order {
		if _, ok := fc.n[k]; ok {
			kept = append(kept, k)
		}
	}
	fc.order = kept
}

// failure handles a failed message of an Each part (r: its report): a
// retry in place while it has retries left, else a dead letter (or, with
// no dead-letter queue or no rule, a failed ack for the broker); after a
// stop, or with the Limit spent, it is given back.
func (l *loop) failure(pt *part, r result) {
	m := pt.msgs[r.i]
	rule, ok := l.ruleFor(m, pt, r)
	if !ok {
		return // parked until the queue's settings are read
	}
	n := l.failures.failed(m)
	text := r.o.Error
	switch {
	case !rule.known:
		l.giveBack(pt, r.i+1, &ackItem{s: Settlement{Message: m, Status: StatusFailed, Error: text}, chosen: StatusFailed})
	case n <= rule.limit && l.phase == running && l.fetcher.limit.take():
		pt.p.units++
		l.hold(pt, r.i, n+1, rule.delay, text)
	case n <= rule.limit: // a stop, or the Limit spent: given back, its count kept here
		l.giveBack(pt, r.i+1, &ackItem{s: Settlement{Message: m, Status: StatusRetry, Error: text}, chosen: StatusFailed})
	case rule.dlqOff:
		// failed: the broker drops it once its own count is spent; until
		// then it comes back, and fails past the limit again.
		l.giveBack(pt, r.i+1, &ackItem{s: Settlement{Message: m, Status: StatusFailed, Error: text}, chosen: StatusFailed})
	default: // its count is kept until the dlq ack is answered (acked)
		if text == "" {
			text = "failed " + strconv.Itoa(n) + " times"
		}
		l.resolvedMsg(pt)
		l.addAck(pt, ackItem{s: Settlement{Message: m, Status: StatusDLQ, Error: text}, chosen: StatusFailed})
		if l.cfg.ackOff {
			l.giveBack(pt, r.i+1, nil)
		}
	}
}

// hold keeps msgs[i] of pt for a retry in place after delay, as its
// attempt-th call; the pop's lease is renewed meanwhile.
func (l *loop) hold(pt *part, i, attempt int, delay time.Duration, text string) {
	pt.msgs = slices.Clone(pt.msgs) // the old slice is the hooks' and the last worker's
	c := *pt.msgs[i]
	c.attempt = attempt
	pt.msgs[i] = &c
	pt.next, pt.failText = i, text
	l.setState(pt, partHeld)
	pt.due = time.Now().Add(delay)
	l.held = append(l.held, pt)
	if !pt.failing {
		pt.failing = true
		pt.p.holding++
		l.startRenewals(pt.p)
	}
}

// retryDue hands on the held parts whose retryDelay is over: an Each
// part's message goes to a handler again, a whole part's acks to the
// broker.
func (l *loop) retryDue(now time.Time) {
	l.held = slices.DeleteFunc(l.held, func(pt *part) bool {
		if now.Before(pt.due) {
			return false
		}
		if pt.whole {
			l.releaseHeldAcks(pt)
		} else {
			l.requeue(pt)
		}
		return true
	})
}

// endHold ends pt's hold at a stop: its message is given back (retry,
// its count kept here), with the rest of its partition.
func (l *loop) endHold(pt *part) {
	if pt.whole {
		l.releaseHeldAcks(pt)
		return
	}
	l.giveBackAtStop(pt)
}

// giveBackAtStop gives back an Each part at a stop from its next message:
// a failed message waiting for its retry, its delay over or not, goes
// back as retry with its error, the outcome chosen failed (no count
// charged at the broker, its count kept here), as one still in its delay.
func (l *loop) giveBackAtStop(pt *part) {
	if !pt.failing || pt.next >= len(pt.msgs) {
		l.giveBack(pt, pt.next, nil)
		return
	}
	m := pt.msgs[pt.next]
	l.giveBack(pt, pt.next+1, &ackItem{s: Settlement{Message: m, Status: StatusRetry, Error: pt.failText}, chosen: StatusFailed})
}

// releaseHeldAcks sends a whole part's acks held for retryDelay.
func (l *loop) releaseHeldAcks(pt *part) {
	pt.pending = append(pt.pending, pt.heldAcks...)
	pt.heldAcks = nil
	l.post(pt)
	l.setState(pt, partIdle)
	pt.resolved = true
	l.resolvedMsg(pt)
	l.check(pt)
}

// wholeDone turns a batch handler's outcomes into acks: a Fail charges
// its message one failure (retry while it has retries left, dlq at the one
// past them); the partitions with such a retry are held for retryDelay
// before their acks go, the others are acked at once.
func (l *loop) wholeDone(pt *part, r result) {
	var rule retryRule
	if slices.ContainsFunc(r.outs, func(o Outcome) bool { return o.Status == StatusFailed }) {
		first := pt.msgs[slices.IndexFunc(r.outs, func(o Outcome) bool { return o.Status == StatusFailed })]
		var ok bool
		if rule, ok = l.ruleFor(first, pt, r); !ok {
			return
		}
	}
	items := make([]ackItem, 0, len(pt.msgs)) // a whole part has one call: nothing pending before
	var heldParts []*Message
	for i, o := range r.outs {
		m := pt.msgs[i]
		switch o.Status {
		case "": // AutoAck(false), success
			l.failures.done(m)
			continue
		case StatusCompleted, StatusDLQ:
			l.failures.done(m)
		}
		it := ackItem{s: Settlement{Message: m, Status: o.Status, Error: o.Error}, chosen: o.Status}
		if o.Status == StatusFailed && rule.known {
			switch n := l.failures.failed(m); {
			case n <= rule.limit:
				it.s.Status = StatusRetry // its error text goes along (the broker ignores it)
				heldParts = append(heldParts, m)
			case rule.dlqOff:
			default: // its count is kept until the dlq ack is answered (acked)
				it.s.Status = StatusDLQ
				if it.s.Error == "" {
					it.s.Error = "failed " + strconv.Itoa(n) + " times"
				}
			}
		}
		items = append(items, it)
	}
	pt.next = len(pt.msgs)
	l.setState(pt, partIdle)
	if len(heldParts) > 0 && rule.delay > 0 && l.phase == running {
		for _, it := range items {
			if slices.ContainsFunc(heldParts, func(h *Message) bool { return samePartition(h, it.s.Message) }) {
				pt.heldAcks = append(pt.heldAcks, it)
			} else {
				pt.pending = append(pt.pending, it)
				l.post(pt)
			}
		}
		l.setState(pt, partHeld)
		pt.due = time.Now().Add(rule.delay)
		l.held = append(l.held, pt)
		pt.failing = true
		pt.p.holding++
		l.startRenewals(pt.p)
		l.check(pt)
		return
	}
	pt.pending = items
	l.post(pt)
	pt.resolved = true
	l.check(pt)
}

// ruleState is the loop's read of the queue's retry settings: read at the
// start, and once more at the first failure when that read found no
// retryLimit (as on 0.15.1, whose message view has it) or no queue. A
// read that fails on the way (a timeout, a 5xx, a broken connection) is no
// answer and is not kept: a later failure reads again, once the backoff
// after it (ruleBackoffMin doubling to ruleBackoffMax) is over. The reads
// go through the sender.
type ruleState struct {
	rule            retryRule
	reads           int // reads answered (a failure on the way is no answer)
	backoff         retryBackoff
	againAt         time.Time // after a read that failed on the way: no read before
	starting        bool      // the read at the start is on its way: no pop before its answer
	job             *job      // a read waiting for the sender
	reading         bool      // a read is queued or in flight
	parked          []*part   // parts whose failure waits for the read
	warnedUnknown   bool      // the queue does not exist: said once
	warnedBroker    bool      // failures are counted by the broker: said once
	warnedTransient bool      // a read at a failure failed on the way: said once
}

// readRuleAtStart asks for the queue's settings before the first pop.
func (l *loop) readRuleAtStart() {
	l.rules.starting = true
	l.askRule(nil)
}

// askRule queues a read of the queue's settings (failed: the message a
// 0.15.1 broker is asked through; nil at the start).
func (l *loop) askRule(failed *Message) {
	l.rules.reading = true
	l.rules.job = &job{kind: jobRule, failed: failed}
}

// giveRuleRead gives the sender the read of the queue's settings that
// waits for it, if one does.
func (l *loop) giveRuleRead() {
	if j := l.rules.job; j != nil {
		l.rules.job = nil
		l.give(j)
	}
}

// ruleFor returns the queue's settings for a failure of m; ok false: they
// are being read, and pt waits with r (parked) until they are.
func (l *loop) ruleFor(m *Message, pt *part, r result) (retryRule, bool) {
	rs := &l.rules
	if !rs.rule.known && !rs.reading && rs.reads < maxRuleReads && !time.Now().Before(rs.againAt) {
		l.askRule(m)
	}
	if !rs.reading {
		return rs.rule, true
	}
	l.setState(pt, partRuleWait)
	pt.parked = &r
	rs.parked = append(rs.parked, pt)
	return retryRule{}, false
}

// ruleRead takes the answer to a read of the queue's settings and goes on
// with the failures that waited for it. A queue the broker does not know
// is logged at Warn once: a pop creates it with the broker's defaults, a
// typo in its name included. Once the reads are spent without an answer,
// the loop sends failed and the broker counts (per partition), which is
// logged at Warn once.
func (l *loop) ruleRead(j *job) {
	rs := &l.rules
	rs.reading, rs.starting = false, false
	switch {
	case j.err == nil:
		rs.reads++
		rs.rule = j.rule
		rs.backoff.reset()
	case transientRuleError(j.err) && l.life.reqCtx.Err() == nil:
		// No answer: not cached; a failure after the backoff reads again.
		if rs.backoff.lo == 0 {
			rs.backoff = retryBackoff{lo: ruleBackoffMin, hi: ruleBackoffMax}
		}
		d := rs.backoff.failed(j.err)
		rs.againAt = time.Now().Add(d)
		if j.failed != nil && !rs.warnedTransient {
			rs.warnedTransient = true
			l.log.Warn("queen: reading the queue's retry settings failed; this failure is acked failed (the broker counts), a later one reads them again",
				"queue", l.cfg.queue, "group", l.cfg.group, "err", j.err, "backoff", d)
		} else {
			l.log.Debug("queen: reading the queue's retry settings failed; a later failure reads them again",
				"queue", l.cfg.queue, "group", l.cfg.group, "err", j.err, "backoff", d)
		}
	default:
		rs.reads++
		if errors.Is(j.err, errQueueUnknown) && !rs.warnedUnknown {
			rs.warnedUnknown = true
			l.log.Warn("queen: the queue does not exist on the broker (is its name right?); a 2.x broker creates it with its defaults at the loop's first pop, a 0.15.1 broker answers its pops empty",
				"queue", l.cfg.queue, "group", l.cfg.group)
		}
		if j.failed != nil && !rs.warnedBroker {
			rs.warnedBroker = true
			l.log.Warn("queen: could not read the queue's retryLimit; failures are acked failed and the broker counts them per partition, not per message",
				"queue", l.cfg.queue, "group", l.cfg.group, "err", j.err)
		}
	}
	l.unpark(func(pt *part, r result) {
		if pt.whole {
			l.wholeDone(pt, r)
			return
		}
		l.failure(pt, r)
		l.afterRun(pt)
	})
}

// unpark ends the wait of the failures parked for the queue's settings:
// each part is at rest again, a lost pop's dropped, the others go on with
// resume (their failure's result).
func (l *loop) unpark(resume func(pt *part, r result)) {
	parked := l.rules.parked
	l.rules.parked = nil
	for _, pt := range parked {
		r := *pt.parked
		pt.parked = nil
		l.setState(pt, partIdle)
		if pt.p.lost {
			l.drop(pt)
			continue
		}
		resume(pt, r)
	}
}
