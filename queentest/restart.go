package queentest

import "time"

// restartLeaseGrace is how long past its expiry the 2.x broker holds a
// lease it reloaded from its store after a restart or a leader change: the
// default of QUEEN_RAFT_MAX_CLOCK_SKEW_MS (rsm/consume/mod.rs Knobs, a lease
// granted before the engine's term is "foreign": state.rs Cur::leased).
const restartLeaseGrace = 500 * time.Millisecond

// Restart stops the broker as a crash would and starts it again d later on
// the same address. Every open connection is cut: a request in flight gets
// no answer, although what the broker had applied stays applied (a pop that
// had claimed keeps its lease, as a claim the real broker had made durable
// does; one caught before it claimed claims nothing). The requests being
// handled end, and then the broker forgets what the real broker of its profile keeps only
// in memory before it listens again:
//
//   - Profile2x: the consume engine's memory (upstream rsm/consume/mod.rs
//     reset, run when a broker starts leading). A partition that a pinned
//     pop of an unregistered group started (subscription "new", "now" or
//     "all") and that delivered nothing to it is started again by the next
//     pinned pop (at the partition's tail for "new"): what was pushed in
//     between is never read by that group unless its pops carry a fixed
//     subscriptionFrom time. Registered groups, cursors that moved, DLQ
//     rows and stored messages are kept. A lease is kept too (a lease of a
//     pop whose answer was lost still holds its messages until it ends),
//     and holds 500 ms past its expiry, the broker's clock-skew grace for a
//     lease it did not grant in its current term.
//   - Profile015: nothing (PostgreSQL keeps every cursor, subscription and
//     lease).
//
// Restart returns once the broker is down, without waiting for d. Queues,
// messages and counters survive, so a test can check that a client rides
// out the restart: every message read, none twice unless its answer was
// lost.
func (s *Server) Restart(d time.Duration) {
	gen, ok := s.down()
	if !ok {
		return
	}
	s.log.Debug("queentest restarting", "down for", d)
	s.awaitIdle()
	s.b.mu.Lock()
	s.b.resetEngine()
	s.b.mu.Unlock()
	s.upAfter(gen, d)
}

// awaitIdle returns once none of s's request handlers runs, or once
// Close began (Close waits for them itself).
func (s *Server) awaitIdle() {
	s.lmu.Lock()
	for s.inflight > 0 && !s.closing {
		s.idle.Wait()
	}
	s.lmu.Unlock()
}

// resetEngine drops what the broker's consume engine keeps only in memory,
// as the 2.x broker does when it starts leading (a restart, a leader
// change: rsm/consume/mod.rs on_leader, on_step_down, reset): the cursors
// without a row (rsm/consume/state.rs Part::has_row: starts that a pinned
// pop of an unregistered group, or a registration, gave a partition where
// nothing was delivered since), and the term of every lease (each becomes
// foreign: restartLeaseGrace). On the 0.15.1 profile it does nothing.
// Callers hold mu.
func (b *broker) resetEngine() {
	if b.legacy {
		return
	}
	for _, p := range b.parts {
		for g, c := range p.cursors {
			if !c.row && c.lease == nil {
				delete(p.cursors, g)
				continue
			}
			if c.lease != nil {
				c.lease.foreign = true
			}
		}
	}
	b.bump()
}
