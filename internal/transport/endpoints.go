package transport

import (
	"cmp"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Balance is how a Transport spreads its calls over its URLs. Whatever
// the balance, a URL that failed rests for RetryPolicy.FailoverPause and
// a retry goes to another URL.
type Balance int

const (
	// Failover sends every call to the first URL that is not resting, in
	// the order of Config.URLs (a primary, then standbys). The zero value.
	Failover Balance = iota
	// RoundRobin sends each call to the next URL that is not resting.
	RoundRobin
	// Affinity sends a call with a Request.Key to the URL that owns the
	// key on a consistent-hash ring (VirtualNodes points per URL), or, when
	// that URL rests, to the next URL on the ring that does not: calls with
	// the same key meet on one URL, and a resting URL's keys alone move. A
	// call without a key goes round robin.
	Affinity
)

// VirtualNodes is how many points each URL has on the Affinity ring.
const VirtualNodes = 128

// endpoints tracks the health of the broker base URLs, shared by all calls
// of one Transport, and picks the URL of each attempt by the balance.
type endpoints struct {
	pause   time.Duration
	now     func() time.Time
	balance Balance
	ring    []point // Affinity: sorted by hash

	mu   sync.Mutex
	urls []endpoint
	seq  uint64 // failures so far
	next uint64 // RoundRobin: calls so far
}

type endpoint struct {
	base      string    // normalised base URL, no trailing slash
	downUntil time.Time // skipped until then
	failed    uint64    // e.seq at its last failure; 0 when it never failed
}

// point is one of a URL's places on the Affinity ring.
type point struct {
	hash uint64
	ep   int
}

func newEndpoints(bases []string, pause time.Duration, now func() time.Time, balance Balance) *endpoints {
	e := &endpoints{pause: pause, now: now, balance: balance, urls: make([]endpoint, len(bases))}
	for i, b := range bases {
		e.urls[i].base = b
	}
	if balance == Affinity && len(bases) > 1 {
		// A URL's points depend on its base alone, so clients that list
		// the same URLs in another order share the ring.
		e.ring = make([]point, 0, len(bases)*VirtualNodes)
		for i, b := range bases {
			for v := range VirtualNodes {
				e.ring = append(e.ring, point{hash: hashKey(b + "-" + strconv.Itoa(v)), ep: i})
			}
		}
		slices.SortFunc(e.ring, func(a, b point) int { return cmp.Or(cmp.Compare(a.hash, b.hash), a.ep-b.ep) })
	}
	return e
}

// Owner returns the index in urls of the URL that owns key on the
// Affinity ring of a Transport of urls: where its calls with Request.Key
// key go while none of urls rests. No URLs, a bad URL or an empty key (a
// call without a key has no owner) is an error.
func Owner(urls []string, key string) (int, error) {
	switch {
	case len(urls) == 0:
		return 0, errors.New("transport: Owner: no URLs")
	case key == "":
		return 0, errors.New("transport: Owner: an empty key has no owner")
	}
	bases, err := parseBaseURLs(urls)
	if err != nil {
		return 0, err
	}
	i, _ := newEndpoints(bases, 0, time.Now, Affinity).pick(key)
	return i, nil
}

// hashKey is the ring's hash: 64-bit FNV-1a, whose values for keys that
// differ in a digit or two lie close together, spread by the finaliser of
// MurmurHash3 (fmix64) so that a URL's points and the keys scatter evenly.
func hashKey(s string) uint64 {
	x := uint64(14695981039346656037) // FNV-1a, inline: no allocation per call
	for i := 0; i < len(s); i++ {
		x ^= uint64(s[i])
		x *= 1099511628211
	}
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// pick returns the index and base of the URL for the next attempt of a
// call with key, by the balance, among the URLs not resting; when every
// URL rests after a failure, the one that failed longest ago.
func (e *endpoints) pick(key string) (int, string) {
	if len(e.urls) == 1 {
		return 0, e.urls[0].base
	}
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	up := func(i int) bool { return !now.Before(e.urls[i].downUntil) }
	n := len(e.urls)
	switch {
	case e.balance == Affinity && key != "":
		h := hashKey(key)
		at, _ := slices.BinarySearchFunc(e.ring, h, func(p point, h uint64) int { return cmp.Compare(p.hash, h) })
		for j := range e.ring {
			if p := e.ring[(at+j)%len(e.ring)]; up(p.ep) {
				return p.ep, e.urls[p.ep].base
			}
		}
	case e.balance == Affinity || e.balance == RoundRobin:
		start := int(e.next % uint64(n))
		e.next++
		for j := range n {
			if i := (start + j) % n; up(i) {
				return i, e.urls[i].base
			}
		}
	default:
		for i := range n {
			if up(i) {
				return i, e.urls[i].base
			}
		}
	}
	best := 0
	for i := range e.urls {
		if e.urls[i].failed < e.urls[best].failed {
			best = i
		}
	}
	return best, e.urls[best].base
}

// allResting reports whether every URL rests after a failure.
func (e *endpoints) allResting() bool {
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, u := range e.urls {
		if !now.Before(u.downUntil) {
			return false
		}
	}
	return true
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
