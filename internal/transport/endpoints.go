package transport

import (
	"sync"
	"time"
)

// endpoints tracks the health of the broker base URLs, shared by all calls
// of one Transport.
type endpoints struct {
	pause time.Duration
	now   func() time.Time

	mu   sync.Mutex
	urls []endpoint
	seq  uint64 // failures so far
}

type endpoint struct {
	base      string    // normalised base URL, no trailing slash
	downUntil time.Time // skipped until then
	failed    uint64    // e.seq at its last failure; 0 when it never failed
}

func newEndpoints(bases []string, pause time.Duration, now func() time.Time) *endpoints {
	e := &endpoints{pause: pause, now: now, urls: make([]endpoint, len(bases))}
	for i, b := range bases {
		e.urls[i].base = b
	}
	return e
}

// pick returns the index and base of the URL for the next attempt: the
// first healthy one in failover order or, when every URL is resting after
// a failure, the one that failed longest ago.
func (e *endpoints) pick() (int, string) {
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	best := 0
	for i := range e.urls {
		if !now.Before(e.urls[i].downUntil) {
			return i, e.urls[i].base
		}
		if e.urls[i].failed < e.urls[best].failed {
			best = i
		}
	}
	return best, e.urls[best].base
}

// markDown records a failure of URL i: it is skipped for the pause.
// It reports whether the URL was healthy before.
func (e *endpoints) markDown(i int) bool {
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	u := &e.urls[i]
	wasUp := !now.Before(u.downUntil)
	e.seq++
	u.failed = e.seq
	u.downUntil = now.Add(e.pause)
	return wasUp
}

// markUp records that URL i answered: it is preferred again at once.
func (e *endpoints) markUp(i int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.urls[i].downUntil = time.Time{}
}
