package queen

import (
	"context"
	"slices"
	"sync/atomic"
	"time"
)

// The scheduler: a pop's messages become groups, and each group is
// handled by one goroutine of the loop (consume_handle.go), in order:
//
//   - per message (Consume, or Each()): one group per partition of the
//     pop; the loop starts a group only when no other group of its
//     partition runs, so a partition's messages are handled one at a time
//     and in order; Concurrency(n) groups run at once, on n partitions;
//   - per pop (ConsumeBatch without Each()): one group, the whole pop.
//
// A group records an outcome per message it handled (group.acks, in
// message order) and where it stopped (group.next): the settler gives
// back msgs[next:] with retry.

// batch is one pop's messages, from its answer until its ack.
type batch struct {
	leaseID  string
	msgs     []*Message
	groups   []*group
	reserved int                     // what its pop took from the Limit
	poppedAt time.Time               // when its answer came
	ctx      context.Context         // the handlers' ctx; a lost lease cancels it
	cancel   context.CancelCauseFunc // of ctx
	keeper   *leaseKeeper            // nil without RenewLease
	left     atomic.Int32            // groups not done
	held     *heldAcks               // the ack held for retryDelay (settle), nil: none

	// one is the group of a pop that makes one group (a batch handler's
	// pop, a pop of one partition), kept in the batch to spare allocating
	// it; groups is then oneRef[:].
	one    group
	oneRef [1]*group
}

// group is what one handler goroutine handles: the messages of one
// partition of a pop, or a whole pop.
type group struct {
	b       *batch
	msgs    []*Message
	whole   bool         // a whole pop (batch handler), not one partition
	acks    []Settlement // outcomes, in message order
	next    int          // msgs[next:] have no outcome: given back with retry
	handled int          // messages given to the handler, for the Limit
	lost    bool         // the lease was lost while it was handled
	goexit  bool         // its handler ended the goroutine (runtime.Goexit)
}

// newBatch turns a pop's answer into groups.
func (e *engine) newBatch(res *popResult, reserved int) *batch {
	b := &batch{leaseID: res.leaseID, msgs: res.messages, reserved: reserved, poppedAt: time.Now(), ctx: e.life.hctx, cancel: func(error) {}}
	if e.cfg.renewEvery > 0 && b.leaseID != "" {
		// Only a renewal can tell that the lease is lost.
		b.ctx, b.cancel = context.WithCancelCause(e.life.hctx)
	}
	switch msgs := res.messages; {
	case !e.cfg.each || onePartition(msgs):
		b.one = group{b: b, msgs: msgs[:len(msgs):len(msgs)], whole: !e.cfg.each}
		b.oneRef[0] = &b.one
		b.groups = b.oneRef[:]
	default:
		parts := splitPartitions(msgs)
		b.groups = make([]*group, len(parts))
		for i, part := range parts {
			b.groups[i] = &group{b: b, msgs: part}
		}
	}
	b.left.Store(int32(len(b.groups)))
	return b
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

func samePartition(a, b *Message) bool {
	return a.PartitionID == b.PartitionID && a.Partition == b.Partition && a.Queue == b.Queue
}

// conflicts says whether g may not start while o runs: one partition.
func (g *group) conflicts(o *group) bool {
	return !g.whole && !o.whole && samePartition(g.msgs[0], o.msgs[0])
}

// scheduler holds the groups of the pops in hand: queued wait for a handler or for their partition, running are
// being handled. A group starts only when no group of its partition runs,
// and the groups of a partition start in the order their pops came.
type scheduler struct {
	wake    wakeup // workers waiting for a group (or, after a stop, a settle)
	queued  []*group
	running []*group
}

func newScheduler() scheduler { return scheduler{wake: newWakeup()} }

// dispatch turns a pop's answer (reserved: what its pop took from the
// Limit) into groups for the scheduler, starts the renewal of its lease,
// and handles its first group on this goroutine, if a handler is free for
// it, so that a pop of one partition is handled with no hand-off; workers
// take the rest. An answer that comes after a stop is given back whole.
func (e *engine) dispatch(res *popResult, reserved int, s *slot) {
	b := e.newBatch(res, reserved)
	l := e.lock()
	mine, live := l.dispatched(b)
	if live && e.cfg.renewEvery > 0 && b.leaseID != "" {
		b.keeper = e.keepLease(b) // before any goroutine can settle b: the loop is held
	}
	l.changed()
	e.unlock()
	if mine != nil {
		e.runGroup(mine, s)
	}
}

// dispatched takes a pop's groups, and gives the first whose partition is
// free to its fetcher (mine); after a stop (live false) the pop goes
// back whole.
func (l *loop) dispatched(b *batch) (mine *group, live bool) {
	l.settler.add()
	if l.phase != running {
		l.fetcher.landed(false)
		if l.fetcher.inflight == 0 {
			l.fetcher.abandon(l.life.pollCancel) // the last pop is back: nothing to wait for
		}
		l.settler.hold(b)
		return nil, false
	}
	l.sched.add(b.groups)
	l.fetcher.landed(l.fetcher.inflight+l.inHand() > l.cfg.slots) // no handler idle: nothing to pace
	return l.sched.take(l.cfg.slots), true
}

// add queues the groups of a pop.
func (s *scheduler) add(groups []*group) { s.queued = append(s.queued, groups...) }

// take moves the first waiting group whose partition is free to running,
// while fewer than slots run.
func (s *scheduler) take(slots int) *group {
	if len(s.running) >= slots {
		return nil
	}
	for i, g := range s.queued {
		if !slices.ContainsFunc(s.running, g.conflicts) {
			s.queued = slices.Delete(s.queued, i, i+1)
			s.running = append(s.running, g)
			return g
		}
	}
	return nil
}

// done takes back a group that ran.
func (s *scheduler) done(g *group) {
	s.running = slices.DeleteFunc(s.running, func(o *group) bool { return o == g })
}

// drop gives back the groups that never started (at a stop), and returns
// the pops whose last group that was.
func (s *scheduler) drop() []*batch {
	var ended []*batch
	for _, g := range s.queued {
		if g.b.left.Add(-1) == 0 {
			ended = append(ended, g.b)
		}
	}
	s.queued = nil
	return ended
}

// held is how many groups wait or run.
func (s *scheduler) held() int { return len(s.queued) + len(s.running) }
