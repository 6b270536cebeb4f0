package queen

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"
)

// The failure count of a consume loop: the loop, not the broker, decides
// when a message has failed often enough to be dead-lettered. Both broker
// generations count failed acks per partition and consumer group, charged
// across the leases that end unfinished (PROTOCOL.md §4.1, §17), so a
// message may be dead-lettered at its first failure because others of its
// partition failed before it. The loop therefore never sends `failed` when
// it knows the queue's retryLimit: it counts each message's failures
// itself, gives the message back with `retry` (which charges nothing)
// while they are at most retryLimit, and sends `dlq` (with the error text)
// at the failure that passes it. failureCounter is that count; retryRule
// is what the loop read of the queue (ruleReader, readRule).

// retryRule is the part of a queue's configuration the loop's count needs.
// known false: the configuration could not be read, and failures are sent
// as `failed` for the broker to count (its per-partition rule).
type retryRule struct {
	known  bool
	limit  int           // retryLimit: failures a message may have before the one that dead-letters it
	delay  time.Duration // retryDelay: how long a failed message waits before it comes back
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
// seen fail and not yet seen settled for good (completed or
// dead-lettered). Safe for concurrent use. The zero value is not usable:
// make one with newFailureCounter.
type failureCounter struct {
	mu    sync.Mutex
	max   int
	n     map[failureKey]int
	order []failureKey // first failures in order, for the bound (may hold forgotten keys)
}

func newFailureCounter(max int) *failureCounter {
	return &failureCounter{max: max, n: map[failureKey]int{}}
}

// failed records one more failure of m and returns how many m has had.
func (fc *failureCounter) failed(m *Message) int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
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
	fc.mu.Lock()
	defer fc.mu.Unlock()
	delete(fc.n, keyOf(m))
	if len(fc.order) > 2*fc.max && len(fc.order) > 2*len(fc.n) {
		fc.compact()
	}
}

// settled forgets the messages of a settle with no failure that were
// completed or dead-lettered (apply does it for the settles with one).
func (fc *failureCounter) settled(acks []Settlement) {
	if fc.size() == 0 {
		return
	}
	for _, s := range acks {
		if s.Status == StatusCompleted || s.Status == StatusDLQ {
			fc.done(s.Message)
		}
	}
}

// count returns how many failures of m the counter holds.
func (fc *failureCounter) count(m *Message) int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.n[keyOf(m)]
}

// size returns how many messages the counter holds a count for.
func (fc *failureCounter) size() int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return len(fc.n)
}

// bound forgets the oldest counts past max (fc.mu held).
func (fc *failureCounter) bound() {
	for len(fc.n) >= fc.max && len(fc.order) > 0 {
		delete(fc.n, fc.order[0])
		fc.order = fc.order[1:]
	}
	if len(fc.order) > 2*fc.max {
		fc.compact()
	}
}

// compact drops the keys of order that were forgotten (fc.mu held).
func (fc *failureCounter) compact() {
	kept := make([]failureKey, 0, len(fc.n))
	for _, k := range fc.order {
		if _, ok := fc.n[k]; ok {
			kept = append(kept, k)
		}
	}
	fc.order = kept
}

// apply turns the outcomes the loop chose for one pop into the statuses it
// sends, under rule: a `failed` becomes `retry` while the message's
// failures are at most rule.limit, and `dlq` (its error kept) at the one
// that passes it; on a queue whose dead-letter queue is off, that one is
// sent `failed`, for the broker to drop (see ConsumeBuilder.OnError). A
// `completed` or `dlq` ends the message's count. sent has the same length
// and order as chosen; retried says whether a failure became a `retry`
// (the settle then honours retryDelay). With rule unknown, chosen is sent
// as it is.
func (fc *failureCounter) apply(rule retryRule, chosen []Settlement) (sent []Settlement, retried bool) {
	if !rule.known {
		return chosen, false
	}
	sent = chosen
	copied := false
	for i, s := range chosen {
		switch s.Status {
		case StatusCompleted, StatusDLQ:
			fc.done(s.Message)
			continue
		case StatusFailed:
		default:
			continue
		}
		if !copied {
			sent, copied = append([]Settlement(nil), chosen...), true
		}
		switch n := fc.failed(s.Message); {
		case n <= max(rule.limit, 0):
			sent[i].Status = StatusRetry // its error text goes along (the broker ignores it)
			retried = true
		case rule.dlqOff:
			// failed: the broker drops it once its own count is spent;
			// until then it comes back, and fails past the limit again.
		default:
			fc.done(s.Message)
			sent[i].Status = StatusDLQ
			if sent[i].Error == "" {
				sent[i].Error = "failed " + strconv.Itoa(n) + " times"
			}
		}
	}
	return sent, retried
}

// ruleReader holds the loop's read of the queue's retry settings: read at
// the start, and once more at the first failure when that read failed (or
// found no retryLimit, as on 0.15.1, whose message view has it).
type ruleReader struct {
	mu            sync.Mutex
	rule          retryRule
	reads         int
	warnedUnknown bool // the queue does not exist: said once
	warnedBroker  bool // failures are counted by the broker: said once
}

// readRule returns the queue's retry settings, reading them while unknown
// (at most maxRuleReads times in all); failed is a message that failed
// (nil at the start). A queue the broker does not know is logged at Warn
// once: a pop creates it with the broker's defaults, a typo in its name
// included. Once the reads are spent without an answer, the loop sends
// failed and the broker counts (per partition), which is logged at Warn
// once.
func (e *engine) readRule(failed *Message) retryRule {
	r := &e.rules
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rule.known || r.reads >= maxRuleReads {
		return r.rule
	}
	r.reads++
	parent := e.life.reqCtx // a settle's read: never a cancelled ctx
	if failed == nil {
		parent = e.life.ctx // the read at the start: a stop ends it
	}
	ctx, cancel := context.WithTimeout(parent, ruleTimeout)
	defer cancel()
	rule, err := e.b.retryRule(ctx, failed)
	if err == nil {
		r.rule = rule
		return rule
	}
	if errors.Is(err, errQueueUnknown) && !r.warnedUnknown {
		r.warnedUnknown = true
		e.log.Warn("queen: the queue does not exist on the broker (is its name right?); a 2.x broker creates it with its defaults at the loop's first pop, a 0.15.1 broker answers its pops empty",
			"queue", e.cfg.queue, "group", e.cfg.group)
	}
	if failed != nil && !r.warnedBroker {
		r.warnedBroker = true
		e.log.Warn("queen: could not read the queue's retryLimit; failures are acked failed and the broker counts them per partition, not per message",
			"queue", e.cfg.queue, "group", e.cfg.group, "err", err)
	}
	return r.rule
}
