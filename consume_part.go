package queen

import (
	"context"
	"slices"
	"time"
)

// The part: what every stage of the loop hands on. A pop's answer is a
// pop of parts (consume_dispatch.go), each handled by one worker at a
// time (consume_handle.go), its outcomes acked (consume_settle.go), a
// failure held for its retry (consume_failures.go). This file is the
// part's own state and its transitions, which every stage uses; it calls
// into none of them.

// pop is one pop's messages, from its answer until the answer to its last
// ack.
type pop struct {
	leaseID string
	msgs    []*Message
	parts   []*part
	units   int       // the Limit's units it holds: messages got, and retries taken
	calls   int       // handler calls made with its messages
	at      time.Time // when its answer came
	ctx     context.Context
	cancel  context.CancelCauseFunc
	open    int  // parts not settled
	lost    bool // a renewal found its lease lost
	// Its renewals (consume_lease.go).
	renewAt  time.Time // the next one (zero: none)
	renewing bool      // one is due or in flight
	failing  bool      // the last one failed on the way (said once)
	holding  int       // parts holding a failed message: renewed without RenewLease too
	// leaseEnd is when its lease ends as far as the loop knows (zero:
	// unknown): the pop's lease from its answer, pushed on by each
	// renewal; grant is the last extension (the pop's lease, then a
	// renewal's). A pop holding a failure is renewed once two thirds of
	// the grant have passed, whatever the plan.
	leaseEnd time.Time
	grant    time.Duration

	// one spares allocating the part of a pop that makes one part (a batch
	// handler's pop, a pop of one partition); parts is then oneRef[:].
	one    part
	oneRef [1]*part
}

// part is what one worker handles at a time: the messages of one
// partition of a pop, or a whole pop.
type part struct {
	p     *pop
	msgs  []*Message
	whole bool // a whole pop (batch handler), not one partition
	next  int  // msgs[next:] not yet given to a handler
	state stage
	due   time.Time // held: when the retry (or the held acks) goes
	// parked is a failure waiting for the read of the queue's settings.
	parked *result
	// failing: msgs[next] failed and waits for, or runs, its retry (its
	// pop's lease is renewed meanwhile); failText is its error.
	failing  bool
	failText string
	// The acks (consume_settle.go): pending, not yet answered; the first
	// sending of them are in the sender's request.
	pending  []ackItem
	sending  int
	heldAcks []ackItem // a whole part's acks waiting for retryDelay
	posted   bool      // in the loop's outbox
	// lingerTill: quick calls' acks may wait for the next ones until then
	// (zero: they go as soon as the sender is free).
	lingerTill time.Time
	signal     bool // pending holds a dlq, retry or failed: what follows waits for it
	resolved   bool // no outcome will come any more
	settled    bool // resolved and every ack answered (or given up)
}

// ackItem is one message's ack: the status sent (s) and the outcome
// chosen, which can differ (a Fail is sent retry or dlq).
type ackItem struct {
	s       Settlement
	chosen  AckStatus
	retried bool // sent before, and that attempt's answer was lost: it may have been applied
}

// stage is where a part's handling is.
type stage uint8

const (
	partIdle     stage = iota // between runs, or resolved
	partQueued                // waiting for a worker
	partBusy                  // a worker has it
	partHeld                  // waiting for a retry (RetryDelay)
	partRuleWait              // a failure waits for the queue's settings
)

// setState moves pt to s, keeping the count of the parts that occupy a
// handler (l.occupying: not settled, not waiting for a retry).
func (l *loop) setState(pt *part, s stage) {
	switch {
	case pt.state == partHeld && s != partHeld:
		l.occupying++
	case pt.state != partHeld && s == partHeld:
		l.occupying--
	}
	pt.state = s
}

// requeue puts pt first in line, to go on from its next message.
func (l *loop) requeue(pt *part) {
	l.setState(pt, partQueued)
	l.queued = slices.Insert(l.queued, 0, pt)
}

func samePartition(a, b *Message) bool {
	return a.PartitionID == b.PartitionID && a.Partition == b.Partition && a.Queue == b.Queue
}

// conflicts says whether pt may not start while o runs: one partition.
func (pt *part) conflicts(o *part) bool {
	return !pt.whole && !o.whole && samePartition(pt.msgs[0], o.msgs[0])
}

// resolvedMsg ends the hold of pt's failed message, if any: its outcome is
// final.
func (l *loop) resolvedMsg(pt *part) {
	if pt.failing {
		pt.failing = false
		pt.p.holding--
	}
}

// deleteOne removes pt from s, keeping the order.
func deleteOne(s []*part, pt *part) []*part {
	for i, o := range s {
		if o == pt {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}
