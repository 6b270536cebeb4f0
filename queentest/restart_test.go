package queentest

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitListening waits until s accepts connections again (a hang guard:
// Restart(0) reopens at once).
func waitListening(t *testing.T, s *Server) {
	t.Helper()
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}, 30*time.Second, 5*time.Millisecond)
}

// On the 2.x profile a restart drops the start a pinned pop of an
// unregistered group gave a partition in mode new (nothing delivered, no
// cursor row): the next pinned pop starts it at its tail again, and what
// was pushed in between is never read. RefuseConnections keeps it; a fixed
// subscriptionFrom time survives the restart.
func TestRestart2xForgetsAPinnedPopsStart(t *testing.T) {
	clock := NewFakeClock(t0)
	s := Start(t, WithClock(clock))
	h := newHC(t, s)
	h.pushN("q", "p", 1) // before the group's first pop: not for it
	clock.Advance(time.Second)
	newMode := vals("consumerGroup", "g", "subscriptionMode", "new")
	st, _ := h.pop("/api/v1/pop/queue/q/partition/p", newMode)
	require.Equal(t, http.StatusNoContent, st)
	from := clock.Now().UTC().Format(time.RFC3339Nano)
	timed := vals("consumerGroup", "t", "subscriptionFrom", from)
	st, _ = h.pop("/api/v1/pop/queue/q/partition/p", timed)
	require.Equal(t, http.StatusNoContent, st)
	// A group read in mode new through the same kind of pop, never
	// restarted under: it keeps its start.
	kept := vals("consumerGroup", "k", "subscriptionMode", "new")
	st, _ = h.pop("/api/v1/pop/queue/q/partition/p", kept)
	require.Equal(t, http.StatusNoContent, st)

	clock.Advance(time.Second)
	h.pushN("q", "p", 1) // after every group's first pop

	s.RefuseConnections(0) // the state stays
	waitListening(t, s)
	_, p := h.pop("/api/v1/pop/queue/q/partition/p", kept)
	require.NotNil(t, p, "RefuseConnections keeps the start")
	assert.Len(t, p.Messages, 1)

	s.Restart(0)
	waitListening(t, s)
	st, p = h.pop("/api/v1/pop/queue/q/partition/p", newMode)
	assert.Equal(t, http.StatusNoContent, st, "the start was forgotten: started at the tail again (%+v)", p)
	_, p = h.pop("/api/v1/pop/queue/q/partition/p", timed)
	require.NotNil(t, p, "a fixed time starts the partition where it did")
	assert.Equal(t, []int{0}, ns(t, p.Messages))
}

// A lease survives a restart (it is in the cursor row) and holds its
// messages 500 ms past its expiry (the broker did not grant it in its
// current term); the delivery attempt goes on counting.
func TestRestart2xKeepsLeasesWithTheSkewGrace(t *testing.T) {
	clock := NewFakeClock(t0)
	s := Start(t, WithClock(clock))
	h := newHC(t, s)
	h.pushN("q", "p", 2)
	q := vals("consumerGroup", "g", "subscriptionMode", "all", "leaseSeconds", "10", "wait", "false")
	first := h.popQ("q", q)
	require.Len(t, first.Messages, 2)

	s.Restart(0)
	waitListening(t, s)
	clock.Advance(10*time.Second + 400*time.Millisecond)
	h.popEmpty("q", q) // expired 400 ms ago, held for the grace
	clock.Advance(200 * time.Millisecond)
	again := h.popQ("q", q)
	assert.Equal(t, ns(t, first.Messages), ns(t, again.Messages))
	assert.Equal(t, 2, again.Messages[0].DeliveryAttempt)

	// A lease granted after the restart has no grace.
	clock.Advance(10*time.Second + time.Millisecond)
	third := h.popQ("q", q)
	assert.Equal(t, 3, third.Messages[0].DeliveryAttempt)
}

// On the 0.15.1 profile a restart forgets nothing: PostgreSQL keeps the
// start of a group read through pinned pops, and leases end on time.
func TestRestart015KeepsEverything(t *testing.T) {
	h := start015(t)
	configure(h.hc, "q", item{"leaseTime": 10})
	h.push15("q", "p", item{"n": 0})
	h.clock.Advance(time.Second)
	pinned := func(q url.Values) tPop {
		t.Helper()
		st, _, raw := h.do("GET", "/api/v1/pop/queue/q/partition/p?"+q.Encode(), nil)
		require.Equalf(t, http.StatusOK, st, "pop %s", raw)
		var p tPop
		require.NoError(t, json.Unmarshal(raw, &p), string(raw))
		return p
	}
	newMode := vals("consumerGroup", "g", "subscriptionMode", "new", "wait", "false")
	require.Empty(t, pinned(newMode).Messages)
	h.clock.Advance(time.Second)
	h.push15("q", "p", item{"n": 1})

	h.srv.Restart(0)
	waitListening(t, h.srv)
	noSub := vals("consumerGroup", "g", "wait", "false")
	p := pinned(noSub)
	require.Equal(t, []int{1}, ns(t, p.Messages), "pushed after the group's first pop")

	h.srv.Restart(0)
	waitListening(t, h.srv)
	h.clock.Advance(10*time.Second + time.Millisecond) // no grace on 0.15.1
	assert.Equal(t, []int{1}, ns(t, pinned(noSub).Messages), "the lease ended on time")
}

// A restart cuts the requests in flight: a parked long poll gets no
// answer, and the broker listens again after d.
func TestRestartCutsRequestsInFlight(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(context.Background(), "GET",
			s.URL+"/api/v1/pop/queue/q?consumerGroup=g&wait=true&timeout=60000", nil)
		resp, err := h.c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	require.Eventually(t, func() bool { return s.Requests(RoutePop) == 1 }, 30*time.Second, 5*time.Millisecond)
	s.Restart(time.Hour)
	require.Error(t, <-errc, "the long poll was cut")
	_, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	require.Error(t, err, "down for the window")
	s.Restart(0) // a second restart ends the window with its own
	waitListening(t, s)
	h.pushN("q", "p", 1)
	assert.Len(t, h.popQ("q", vals("consumerGroup", "g", "subscriptionMode", "all")).Messages, 1)
}

// Every answer carries a Date from the broker's Clock, as the real brokers
// send theirs.
func TestDateHeaderFollowsTheClock(t *testing.T) {
	for _, prof := range []Profile{Profile2x, Profile015} {
		clock := NewFakeClock(time.Date(2031, 5, 6, 7, 8, 9, 900_000_000, time.UTC))
		s := Start(t, WithClock(clock), WithProfile(prof))
		h := newHC(t, s)
		_, hdr, _ := h.do("GET", "/health", nil)
		assert.Equal(t, "Tue, 06 May 2031 07:08:09 GMT", hdr.Get("Date"), prof)
		clock.Advance(time.Hour)
		_, hdr, _ = h.do("GET", "/api/v1/pop/queue/q?wait=false", nil)
		assert.Equal(t, "Tue, 06 May 2031 08:08:09 GMT", hdr.Get("Date"), prof)
	}
}
