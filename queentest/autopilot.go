package queentest

import (
	"math"
	"time"
)

// The pop autopilot: with autopilot=true on a wildcard pop, the broker picks
// the dimensions the client left out and echoes its choice as
// "autopilot":{"partitions":W,"batch":B}. A dimension the client sent is
// never changed.
//
// Looked up upstream (queen-mq/queen, server/src/rsm/facade/autopilot.rs and
// handlers/data.rs): W is the group's partitions ready now divided among
// this (queue, group) lane's pops in flight, clamped to 1..64; B follows the
// lane's measured drain rate (messages acked per second of lease) times a
// 200 ms budget, clamped to 100..1000, and a cold lane starts at 100. The
// echo has only partitions and batch (no waitMs). A conflating pop and the
// pinned and discovery routes are exempt. Our version keeps those rules,
// measuring the drain on the broker's Clock.

const (
	apBatchMin    = 100
	apBatchMax    = 1000
	apWidthMax    = 64
	apDrainBudget = 0.2 // seconds
	apAlpha       = 0.25
	apLeaseTTL    = 5 * time.Minute
)

type laneKey struct{ queue, group string }

type apLane struct {
	live  int
	drain float64 // messages acked per second of lease, smoothed; 0 = cold
}

type apLease struct {
	lane laneKey
	at   time.Time
	left int
}

type autopilot struct {
	lanes  map[laneKey]*apLane
	leases map[string]*apLease
}

func newAutopilot() autopilot {
	return autopilot{lanes: map[laneKey]*apLane{}, leases: map[string]*apLease{}}
}

func (a *autopilot) lane(k laneKey) *apLane {
	l := a.lanes[k]
	if l == nil {
		l = &apLane{}
		a.lanes[k] = l
	}
	return l
}

// enter counts a pop of lane k as live; the returned func ends it. Callers
// hold broker.mu for both.
func (a *autopilot) enter(k laneKey) func() {
	a.lane(k).live++
	return func() {
		if l := a.lanes[k]; l != nil && l.live > 0 {
			l.live--
		}
	}
}

// plan chooses the width and batch of one pop attempt of lane k; ready is
// the number of the group's partitions claimable now.
func (a *autopilot) plan(k laneKey, ready int, autoParts, autoBatch bool, parts, batch int) (int, int) {
	l := a.lane(k)
	live := max(l.live, 1)
	if autoParts {
		parts = min(max((ready+live-1)/live, 1), apWidthMax)
	}
	if autoBatch {
		batch = apBatchMin
		if l.drain > 0 {
			batch = int(math.Round(l.drain * apDrainBudget))
			batch = min(max(batch, apBatchMin), apBatchMax)
		}
	}
	return parts, batch
}

// delivered starts the drain clock of a lease that handed out n messages.
func (a *autopilot) delivered(k laneKey, leaseID string, n int, now time.Time) {
	if n <= 0 || leaseID == "" {
		return
	}
	for id, r := range a.leases {
		if now.Sub(r.at) > apLeaseTTL {
			delete(a.leases, id)
		}
	}
	a.leases[leaseID] = &apLease{lane: k, at: now, left: n}
}

// acked takes one drain sample: n messages of the lease acked since delivery.
func (a *autopilot) acked(leaseID string, n int, now time.Time) {
	r := a.leases[leaseID]
	if r == nil || n <= 0 {
		return
	}
	secs := math.Max(now.Sub(r.at).Seconds(), 0.001)
	rate := float64(n) / secs
	r.left -= n
	if r.left <= 0 {
		delete(a.leases, leaseID)
	}
	l := a.lane(r.lane)
	if l.drain == 0 {
		l.drain = rate
	} else {
		l.drain = (1-apAlpha)*l.drain + apAlpha*rate
	}
}
