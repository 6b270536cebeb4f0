package queen

import (
	"context"
	"slices"
	"time"
)

// Dispatch: a pop's answer becomes parts, each handled by one worker at a
// time, in order:
//
//   - per message (Consume, or Each()): one part per partition of the
//     pop; a part starts only when no other part of its partition runs,
//     so a partition's messages are handled one at a time and in order;
//     Concurrency(n) parts run at once, on n partitions;
//   - per pop (ConsumeBatch without Each()): one part, the whole pop.
//
// A part keeps where its handling is (next: the first message not yet
// given to a handler) and the outcomes not yet acked (consume_settle.go).

// newPop turns a pop's answer into parts.
func (l *loop) newPop(res *popResult) *pop {
	p := &pop{leaseID: res.leaseID, msgs: res.messages, units: len(res.messages), at: time.Now()}
	p.ctx, p.cancel = context.WithCancelCause(l.life.hctx)
	msgs := res.messages
	if l.failures.size() > 0 {
		// A message this loop counted failures of comes back with its
		// attempt (a copy: the answer's messages are the hooks' too).
		cloned := false
		for i, m := range msgs {
			if n := l.failures.count(m); n > 0 {
				if !cloned {
					msgs, cloned = slices.Clone(msgs), true
				}
				c := *m
				c.attempt = n + 1
				msgs[i] = &c
			}
		}
		p.msgs = msgs
	}
	switch {
	case !l.cfg.each || onePartition(msgs):
		p.one = part{p: p, msgs: msgs[:len(msgs):len(msgs)], whole: !l.cfg.each}
		p.oneRef[0] = &p.one
		p.parts = p.oneRef[:]
	default:
		split := splitPartitions(msgs)
		p.parts = make([]*part, len(split))
		for i, s := range split {
			p.parts[i] = &part{p: p, msgs: s}
		}
	}
	p.open = len(p.parts)
	l.occupying += len(p.parts)
	if lease := l.leaseLen(); lease > 0 {
		p.grant, p.leaseEnd = lease, p.at.Add(lease)
	}
	return p
}

// dispatched takes a pop's answer with messages: its parts wait for a
// worker, its renewals start; queued says so. An answer that comes after
// the stop is given back whole.
func (l *loop) dispatched(res *popResult) (queued bool) {
	p := l.newPop(res)
	l.pops = append(l.pops, p)
	if l.phase == running {
		l.startRenewals(p)
		for _, pt := range p.parts {
			l.setState(pt, partQueued)
			l.queued = append(l.queued, pt)
		}
		return true
	}
	for _, pt := range p.parts {
		l.giveBack(pt, 0, nil)
	}
	return false
}

// dispatch hands the waiting parts whose partition is free to idle
// workers, in order.
func (l *loop) dispatch() {
	for i := 0; i < len(l.queued) && len(l.running) < l.workers && l.phase == running; {
		pt := l.queued[i]
		if slices.ContainsFunc(l.running, pt.conflicts) {
			i++
			continue
		}
		l.queued = slices.Delete(l.queued, i, i+1)
		l.start(pt)
	}
}

// start hands pt to a worker from its next message.
func (l *loop) start(pt *part) {
	l.setState(pt, partBusy)
	l.running = append(l.running, pt)
	l.e.workc <- work{pt: pt, msgs: pt.msgs, from: pt.next, whole: pt.whole, ctx: pt.p.ctx}
}

// splitPartitions cuts msgs into partitions, in the order the partitions
// first appear, each partition's messages in their order. (A broker lists
// a pop partition after partition; a partition in several runs is put
// together all the same.) A partition in one run is a slice of msgs
// itself, capped so that nothing appends into msgs.
func splitPartitions(msgs []*Message) [][]*Message {
	var parts [][]*Message
	for start := 0; start < len(msgs); {
		end := start + 1
		for end < len(msgs) && samePartition(msgs[end], msgs[start]) {
			end++
		}
		run := msgs[start:end:end]
		i := 0
		for i < len(parts) && !samePartition(parts[i][0], run[0]) {
			i++
		}
		if i == len(parts) {
			parts = append(parts, run)
		} else {
			parts[i] = append(parts[i], run...) // a copy: run is capped
		}
		start = end
	}
	return parts
}

// onePartition reports whether msgs are all of one partition.
func onePartition(msgs []*Message) bool {
	for _, m := range msgs[min(1, len(msgs)):] {
		if !samePartition(m, msgs[0]) {
			return false
		}
	}
	return true
}
