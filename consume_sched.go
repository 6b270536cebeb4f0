package queen

import (
	"context"
	"slices"
	"time"
)

// The scheduling of a consume loop. Concurrency(n) is n handler slots and
// n pollers, goroutines all:
//
//   - a slot takes the next partition group waiting: the messages of one
//     partition of a pop (under Each), or a whole pop (a batch handler), and
//     handles them in order, alone; else it waits;
//   - a poller pops only while the pops in flight and the groups waiting are
//     fewer than the slots waiting for work, so that a pop is sent only for
//     a free slot: at most n pops are in flight or being handled, as many
//     as the slots (the bound on memory). The groups of a pop go to
//     whichever slots are free: with the autopilot one pop may take every
//     ready partition, and its partitions are then handled side by side.
//
// A pop's lease is renewed from its arrival until its last group is done;
// the slot that finishes the last group settles the pop's outcomes in one
// batch ack, partition after partition, each in order. A partition stays
// leased to its pop until that ack, so no other pop gets it meanwhile; a
// group whose partition a slot is still handling (its lease ran out and the
// broker gave it again) waits for that slot all the same.
//
// Limit: each pop reserves its batch from the Limit, at most a fair share
// of what is left (ceil(left / n)), so that one pop cannot leave the other
// slots nothing to do; what a pop did not deliver goes back at once, what
// it delivered and was not handled once the pop is settled.

// consumePop is one pop's messages while its partition groups are handled.
type consumePop struct {
	leaseID string
	ctx     context.Context         // the handlers' ctx: also cancelled when the lease is lost
	cancel  context.CancelCauseFunc // of ctx, when the lease is renewed
	rn      *renewer
	msgs    int          // messages delivered
	acks    []Settlement // the groups' outcomes: one region each, in group order
	groups  []partGroup
	one     [1]partGroup // groups' storage for a pop of one partition
	left    int          // groups not done; under consumeRun.mu
}

// partGroup is what one slot handles: the messages of one partition of a
// pop, in order (under Each), or the whole pop (a batch handler).
type partGroup struct {
	pop     *consumePop
	msgs    []*Message
	acks    []Settlement // the outcomes, in message order; a region of pop.acks
	next    int          // msgs[next:] have no outcome yet
	handled int          // handler calls' messages, for the Limit
	lost    bool         // the lease was lost while it was handled
	whole   bool         // a batch handler's pop: not one partition
}

// startWorker starts one handler slot.
func (r *consumeRun) startWorker() {
	r.workers.Add(1)
	go func() {
		defer r.workers.Done()
		for {
			g := r.next()
			if g == nil {
				return
			}
			r.runGroup(g)
		}
	}()
}

// next waits for the slot's next group. nil means the slot is done: the
// loop stops and no group waits (one that arrives later is given back by
// its poller), or the Limit is reached.
func (r *consumeRun) next() *partGroup {
	r.stopping() // an ended ctx stops the loop before any pop
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		// Read under mu: stop broadcasts under mu after it closed stopCh,
		// so a stop is either seen here or wakes the Wait below.
		stopped := r.isStopped()
		if g := r.takeReady(stopped); g != nil {
			return g
		}
		if stopped || r.limitReached() {
			return nil
		}
		r.free++
		if r.inflight+len(r.ready) < r.free {
			r.popCond.Signal() // a pop for this slot
		}
		r.workCond.Wait()
		r.free--
	}
}

// isStopped says whether stop was called (stopping also reads the ctxs).
func (r *consumeRun) isStopped() bool {
	select {
	case <-r.stopCh:
		return true
	default:
		return false
	}
}

// limitReached says whether the Limit is all handled; r.mu held.
func (r *consumeRun) limitReached() bool {
	return r.limited && r.budget <= 0 && r.outstanding == 0
}

// takeReady takes the first waiting group whose partition no slot is
// handling (any: the first, when it is only to be given back); r.mu held.
func (r *consumeRun) takeReady(any bool) *partGroup {
	for i, g := range r.ready {
		if any || !r.partitionBusy(g) {
			r.ready = slices.Delete(r.ready, i, i+1)
			r.running = append(r.running, g)
			return g
		}
	}
	return nil
}

// partitionBusy says whether a slot is handling g's partition; r.mu held.
func (r *consumeRun) partitionBusy(g *partGroup) bool {
	if g.whole {
		return false
	}
	for _, o := range r.running {
		if !o.whole && samePartition(o.msgs[0], g.msgs[0]) {
			return true
		}
	}
	return false
}

func samePartition(a, b *Message) bool {
	return a.PartitionID == b.PartitionID && a.Partition == b.Partition && a.Queue == b.Queue
}

// poller sends pops, one at a time, each when popTurn allows it.
func (r *consumeRun) poller() {
	var backoff time.Duration
	for {
		n, ok := r.popTurn()
		if !ok {
			return
		}
		if r.stopping() {
			r.popped(n, nil)
			return
		}
		began := time.Now()
		r.popping.Add(1)
		res, err := r.popOnce(n)
		if r.popping.Add(-1) == 0 && r.stopping() {
			r.abandonPops() // the last pop in flight is back: no need to wait
		}
		if err == nil && len(res.messages) > 0 {
			backoff = 0
			r.popped(n, r.newPop(res))
			continue
		}
		r.popped(n, nil)
		switch {
		case err == nil:
			backoff = 0
			r.sleep(r.emptyDelay(res, time.Since(began)))
		case r.stopping():
			return
		case fatalPopError(err):
			r.c.log.Error("queen: consume loop stopped by the broker's refusal", "queue", r.queue, "group", r.group, "err", err)
			r.fail(err)
			return
		default:
			backoff = r.nextBackoff(backoff)
			r.c.log.Warn("queen: pop failed, backing off", "queue", r.queue, "group", r.group, "err", err, "backoff", backoff)
			r.sleep(backoff)
		}
	}
}

// popTurn waits until a pop may go: fewer pops in flight and groups
// waiting than slots waiting for work, and some Limit left, of which it
// reserves the pop's batch n (0 without a Limit). false: the loop stops or
// the Limit is reached.
func (r *consumeRun) popTurn() (n int, ok bool) {
	r.stopping() // an ended ctx stops the loop before any pop
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.isStopped() || r.limitReached() { // under mu: see next
			return 0, false
		}
		if r.inflight+len(r.ready) < r.free {
			if n, ok := r.reserve(); ok {
				r.inflight++
				return n, true
			}
		}
		r.popCond.Wait()
	}
}

// reserve takes the batch of the next pop from the Limit; r.mu held. It
// returns 0, true without a Limit, and false when nothing is left to
// reserve.
func (r *consumeRun) reserve() (int, bool) {
	if !r.limited {
		return 0, true
	}
	if r.budget <= 0 {
		return 0, false
	}
	want := autopilotMaxBatch
	if r.req.query.Batch != nil {
		want = max(*r.req.query.Batch, 1)
	}
	share := (r.budget + r.outstanding + r.slots - 1) / r.slots
	n := min(r.budget, want, share)
	r.budget -= n
	r.outstanding += n
	return n, true
}

// unreserve ends the hold of n reserved messages on the Limit, used of them
// handled (the rest goes back to the budget), and wakes who waits for it;
// r.mu held.
func (r *consumeRun) unreserve(n, used int) {
	if !r.limited {
		return
	}
	wasEmpty := r.budget <= 0
	r.outstanding -= n
	r.budget += n - used
	switch {
	case r.limitReached():
		r.popCond.Broadcast()
		r.workCond.Broadcast()
	case wasEmpty && r.budget > 0:
		r.popCond.Broadcast()
	}
}

// release ends the hold of a settled pop of n messages on the Limit, used
// of them handled.
func (r *consumeRun) release(n, used int) {
	if !r.limited {
		return
	}
	r.mu.Lock()
	r.unreserve(n, used)
	r.mu.Unlock()
}

// popped ends a pop that reserved n: what it did not deliver goes back to
// the Limit, and p's groups (if any) wait for free slots. Once the loop is
// stopping they are given back here, at once.
func (r *consumeRun) popped(n int, p *consumePop) {
	got := 0
	if p != nil {
		got = p.msgs
	}
	r.mu.Lock()
	r.inflight--
	r.unreserve(n-got, 0)
	stopped := r.isStopped()
	if p != nil && !stopped {
		for i := range p.groups {
			r.ready = append(r.ready, &p.groups[i])
		}
		if r.free > 0 {
			r.workCond.Broadcast()
		}
	}
	r.mu.Unlock()
	if p != nil && stopped {
		for i := range p.groups {
			g := &p.groups[i]
			g.giveBack(0)
			r.finishGroup(g)
		}
	}
}

// newPop starts the handling of a pop that delivered messages: its groups,
// and the renewal of its lease.
func (r *consumeRun) newPop(res *popResult) *consumePop {
	r.busy.Add(1)
	r.touch()
	msgs := res.messages
	p := &consumePop{leaseID: res.leaseID, ctx: r.hctx, msgs: len(msgs)}
	// The handlers' ctx: the loop's, plus a cancel for a lost lease when the
	// lease is renewed (only a renewal can tell it is lost).
	if r.renewEvery > 0 && res.leaseID != "" {
		p.ctx, p.cancel = context.WithCancelCause(r.hctx)
		p.rn = r.startRenewer(res.leaseID, p.cancel)
	}
	if r.each {
		p.groups = splitPartitions(p.one[:0], msgs)
	} else {
		p.one[0] = partGroup{msgs: msgs, whole: true}
		p.groups = p.one[:]
	}
	p.acks = make([]Settlement, len(msgs))
	off := 0
	for i := range p.groups {
		g := &p.groups[i]
		g.pop = p
		g.acks = p.acks[off : off : off+len(g.msgs)]
		off += len(g.msgs)
	}
	p.left = len(p.groups)
	return p
}

// splitPartitions appends to dst the partition groups of msgs, in the order
// their partitions first appear, each partition's messages in their order.
func splitPartitions(dst []partGroup, msgs []*Message) []partGroup {
	for i := 0; i < len(msgs); {
		j := i + 1
		for j < len(msgs) && samePartition(msgs[i], msgs[j]) {
			j++
		}
		dst = append(dst, partGroup{msgs: msgs[i:j:j]})
		i = j
	}
	// A broker lists a pop partition after partition; should one mix them,
	// a partition's runs are put together.
	for k := 1; k < len(dst); k++ {
		for _, o := range dst[:k] {
			if samePartition(o.msgs[0], dst[k].msgs[0]) {
				return regroupPartitions(dst[:0], msgs)
			}
		}
	}
	return dst
}

func regroupPartitions(dst []partGroup, msgs []*Message) []partGroup {
	sorted := make([]*Message, 0, len(msgs))
	taken := make([]bool, len(msgs))
	for i, m := range msgs {
		if taken[i] {
			continue
		}
		start := len(sorted)
		for j := i; j < len(msgs); j++ {
			if !taken[j] && samePartition(m, msgs[j]) {
				sorted = append(sorted, msgs[j])
				taken[j] = true
			}
		}
		dst = append(dst, partGroup{msgs: sorted[start:len(sorted):len(sorted)]})
	}
	return dst
}

// runGroup handles one group and, if it was its pop's last, settles the
// pop. Should a handler end its goroutine (runtime.Goexit, as t.FailNow
// does), the group's messages without an outcome, the running one
// included, are still given back on the way out, and another slot takes
// this one's place (to give back what waits).
func (r *consumeRun) runGroup(g *partGroup) {
	returned := false
	defer func() {
		if returned {
			return
		}
		r.c.log.Error("queen: consume handler ended its goroutine (runtime.Goexit); the loop stops",
			"queue", r.queue, "group", r.group)
		r.fail(errHandlerGoexit)
		if !leaseLost(g.pop.ctx) {
			g.giveBack(g.next)
		}
		r.finishGroup(g)
		r.startWorker()
	}()
	if r.each {
		r.handleEach(g)
	} else {
		r.handleWhole(g)
	}
	returned = true
	r.finishGroup(g)
}

// giveBack gives back g's messages from the from-th on with a retry ack.
func (g *partGroup) giveBack(from int) {
	for _, m := range g.msgs[from:] {
		g.acks = append(g.acks, Settlement{Message: m, Status: StatusRetry})
	}
	g.next = len(g.msgs)
}

// handleEach calls the handler once per message of g's partition, in
// order. After a failed or retried message the rest of the partition is
// given back (retry) in the same ack; on a stop the messages not started
// are given back.
func (r *consumeRun) handleEach(g *partGroup) {
	ctx := g.pop.ctx
	for i, m := range g.msgs {
		g.next = i
		if leaseLost(ctx) {
			g.lost = true
			return
		}
		if r.stopping() {
			g.giveBack(i)
			return
		}
		g.handled++
		var err error
		hctx, turn := r.c.hooks.handlerStart(ctx, r.queue, r.group, g.msgs[i:i+1:i+1])
		if r.cb.handle != nil {
			err = r.call(hctx, m)
		} else {
			err = r.callBatch(hctx, g.msgs[i:i+1:i+1])
		}
		if leaseLost(ctx) {
			r.c.hooks.handlerEnd(hctx, turn, err, nil, true)
			g.lost = true
			return
		}
		o, send := r.decide(hctx, m, err)
		var outcome [1]Outcome
		if send {
			g.acks = append(g.acks, Settlement{Message: m, Status: o.Status, Error: o.Error})
			outcome[0] = o
		}
		r.c.hooks.handlerEnd(hctx, turn, err, outcome[:], false)
		if o.Status == StatusFailed || o.Status == StatusRetry {
			// The rest of the partition goes back in the same ack, so that
			// its lease is released whatever the broker decides about the
			// failed message (0.15.1 keeps it after a dead-lettering
			// failed: PROTOCOL.md §16). A retry spends no retry.
			g.giveBack(i + 1)
			return
		}
	}
	g.next = len(g.msgs)
}

// handleWhole calls the batch handler once with the whole pop. After an
// error each partition's first message is failed and the rest follows it
// (or OnError decides, message by message, until a Fail or Retry).
func (r *consumeRun) handleWhole(g *partGroup) {
	ctx := g.pop.ctx
	if r.stopping() {
		g.giveBack(0)
		return
	}
	g.handled = len(g.msgs)
	hctx, turn := r.c.hooks.handlerStart(ctx, r.queue, r.group, g.msgs)
	err := r.callBatch(hctx, g.msgs)
	if leaseLost(ctx) {
		r.c.hooks.handlerEnd(hctx, turn, err, nil, true)
		g.lost = true
		return
	}
	var outcomes []Outcome // for the hooks, only when there are some
	if turn.active() {
		outcomes = make([]Outcome, len(g.msgs))
	}
	var skip partSet
	for i, m := range g.msgs {
		g.next = i
		if skip.has(m.PartitionID) {
			// Given back with the failed message's ack (see handleEach).
			g.acks = append(g.acks, Settlement{Message: m, Status: StatusRetry})
			if outcomes != nil {
				outcomes[i] = Retry()
			}
			continue
		}
		o, send := r.decide(hctx, m, err) // after Fail, the rest of the partition follows it
		if send {
			g.acks = append(g.acks, Settlement{Message: m, Status: o.Status, Error: o.Error})
			if outcomes != nil {
				outcomes[i] = o
			}
		}
		if o.Status == StatusFailed || o.Status == StatusRetry {
			skip = append(skip, m.PartitionID)
		}
	}
	r.c.hooks.handlerEnd(hctx, turn, err, outcomes, false)
	g.next = len(g.msgs)
}

// finishGroup frees g's slot; the last group of a pop settles the pop.
func (r *consumeRun) finishGroup(g *partGroup) {
	p := g.pop
	r.mu.Lock()
	if i := slices.Index(r.running, g); i >= 0 {
		r.running = slices.Delete(r.running, i, i+1)
	}
	p.left--
	last := p.left == 0
	if len(r.ready) > 0 {
		r.workCond.Broadcast() // g's partition is free again
	}
	r.mu.Unlock()
	if last {
		r.settlePop(p)
	}
}

// settlePop ends a pop whose groups are all done: the renewals stop, and
// its outcomes go to the broker in one batch ack, partition after
// partition.
func (r *consumeRun) settlePop(p *consumePop) {
	if p.rn != nil {
		p.rn.stop()
	}
	acks := p.acks[:0]
	handled, lost := 0, false
	for i := range p.groups {
		g := &p.groups[i]
		acks = append(acks, g.acks...) // moves each region down, after the one before
		handled += g.handled
		lost = lost || g.lost
	}
	if lost {
		r.c.log.Warn("queen: lease lost while handling; the running handlers' outcomes are not acked",
			"queue", r.queue, "group", r.group, "leaseId", p.leaseID)
	}
	r.settle(acks)
	if p.cancel != nil {
		p.cancel(nil)
	}
	r.touch()
	r.busy.Add(-1)
	r.release(p.msgs, handled)
}
