package queentest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFailNextAnswersWithoutApplying(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	s.FailNext(RoutePush, 2, http.StatusServiceUnavailable, 2*time.Second)
	s.FailNext(RoutePush, 1, http.StatusTooManyRequests, 50*time.Millisecond)

	for i := 0; i < 2; i++ {
		st, hdr, raw := h.do("POST", "/api/v1/push", item{"items": []item{{"queue": "q", "payload": i}}})
		assert.Equal(t, http.StatusServiceUnavailable, st)
		assert.Equal(t, "2", hdr.Get("Retry-After"))
		var e map[string]string
		require.NoError(t, json.Unmarshal(raw, &e))
		assert.Equal(t, "retry", e["code"])
		assert.NotEmpty(t, e["error"])
	}
	st, hdr, raw := h.do("POST", "/api/v1/push", item{"items": []item{{"queue": "q", "payload": 3}}})
	assert.Equal(t, http.StatusTooManyRequests, st)
	assert.Equal(t, "0.05", hdr.Get("Retry-After"))
	assert.Contains(t, string(raw), `"code"`)

	// Nothing was applied; the fourth push goes through.
	h.doJSON("GET", "/api/v1/resources/queues/q", nil, http.StatusNotFound, nil)
	h.pushN("q", "p", 1)
	assert.Equal(t, 4, s.Requests(RoutePush), "faulted requests are counted")

	// Other routes are not affected, and no Retry-After without one.
	s.FailNext(RoutePop, 1, http.StatusInternalServerError, 0)
	st, hdr, _ = h.do("GET", "/api/v1/pop/queue/q", nil)
	assert.Equal(t, http.StatusInternalServerError, st)
	assert.Empty(t, hdr.Get("Retry-After"))
	h.popQ("q", nil)
}

func TestAddLatency(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	// A latency longer than the test: what it tells apart is whether a
	// route waits for it, not how long anything took.
	const latency = time.Minute
	s.AddLatency(RouteHealth, latency)
	// The delayed route: a request that gives up after 200 ms gets nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", s.URL+"/health", nil)
	require.NoError(t, err)
	_, err = h.c.Do(req)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the health route waits for its latency")
	// Another route answers: with the latency on it, it would take a minute
	// (and h's 70 s client timeout would not fail before it).
	start := time.Now()
	h.pushN("q", "p", 1)
	assert.Less(t, time.Since(start), latency/2, "another route does not wait")
	s.AddLatency(RouteHealth, 0)
	start = time.Now()
	h.doJSON("GET", "/health", nil, http.StatusOK, nil)
	assert.Less(t, time.Since(start), latency/2, "a latency of 0 removes it")
	assert.Equal(t, 2, s.Requests(RouteHealth))
}

func TestDropNextResponsesAppliesThenCutsTheConnection(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	s.DropNextResponses(RoutePush, 1)
	req, err := http.NewRequest("POST", s.URL+"/api/v1/push", strings.NewReader(`{"items":[{"queue":"q","payload":1,"transactionId":"once"}]}`))
	require.NoError(t, err)
	_, err = h.c.Do(req)
	require.Error(t, err, "the client sees a broken connection")
	assert.True(t, errors.Is(err, io.EOF) || strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "reset"), err.Error())

	// The broker acted: the message is there, and a retry is a duplicate.
	out := h.push(item{"queue": "q", "payload": 1, "transactionId": "once"})
	assert.Equal(t, "duplicate", out[0].Status)
	p := h.popQ("q", nil)
	assert.Len(t, p.Messages, 1)

	// A dropped ack was applied as well.
	s.DropNextResponses(RouteAck, 1)
	m := p.Messages[0]
	body := `{"transactionId":"` + m.TransactionID + `","partitionId":"` + m.PartitionID + `","leaseId":"` + m.LeaseID + `"}`
	req, _ = http.NewRequest("POST", s.URL+"/api/v1/ack", strings.NewReader(body))
	_, err = h.c.Do(req)
	require.Error(t, err)
	assert.Equal(t, 0, s.LeasedCount("q", ""))
	// Its retry is answered as the first time.
	assert.True(t, h.ackMsg(m, "completed", "").Success)
}

func TestRefuseConnectionsThenListenAgain(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	h.pushN("q", "p", 1)
	// A window no run reaches: the checks of the refusal hold however slow
	// the machine (a window of 300 ms could end before them).
	s.RefuseConnections(time.Hour)
	_, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	require.Error(t, err, "connections are refused")
	_, err = h.c.Get(s.URL + "/health")
	require.Error(t, err, "kept-alive connections were closed too")

	// A second call restarts the window, with its own length: the broker
	// listens again 300 ms later, not an hour later.
	s.RefuseConnections(300 * time.Millisecond)
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}, 30*time.Second, 20*time.Millisecond) // a hang guard: the refusal lasts 300 ms
	// Same port, same state.
	p := h.popQ("q", nil)
	assert.Len(t, p.Messages, 1)
}

func TestRequestCountersPerRoute(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	h.pushN("q", "p", 1)
	h.pushN("q", "p", 1)
	p := h.popQ("q", nil)
	h.popEmpty("q", nil)
	h.do("GET", "/api/v1/pop/queue/q/partition/p", nil)
	h.ackMsg(p.Messages[0], "completed", "")
	h.ack("/api/v1/ack/batch", item{"acknowledgments": []item{}})
	h.do("POST", "/api/v1/lease/x/extend", nil)
	h.do("POST", "/api/v1/transaction", `{}`)
	configure(h, "q", item{"ttl": 1})
	h.do("GET", "/api/v1/resources/queues", nil)
	h.do("POST", "/api/v1/consumer-groups/g/queues/q/seek", nil)
	h.do("GET", "/api/v1/consumer-groups", nil)
	h.do("GET", "/api/v1/dlq", nil)
	h.do("POST", "/api/v1/fetch", `{}`)
	h.do("GET", "/health", nil)
	h.do("GET", "/api/v1/nope", nil)
	want := map[Route]int{
		RoutePush: 2, RoutePop: 3, RouteAck: 1, RouteAckBatch: 1, RouteRenew: 1, RouteTransaction: 1,
		RouteConfigure: 1, RouteQueues: 1, RouteSeek: 1, RouteGroups: 1, RouteDLQ: 1, RouteFetch: 1, RouteHealth: 1,
	}
	for r, n := range want {
		assert.Equal(t, n, s.Requests(r), r)
	}
	s.ResetCounters()
	for r := range want {
		assert.Zero(t, s.Requests(r), r)
	}
}

func TestCloseEndsParkedLongPolls(t *testing.T) {
	s := NewServer()
	h := newHC(t, s)
	done := make(chan error, 1)
	go func() {
		resp, err := h.c.Get(s.URL + "/api/v1/pop/queue/q?wait=true&timeout=60000")
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	require.NoError(t, s.AwaitRequests(t.Context(), RoutePop, 1)) // the pop has reached the broker
	start := time.Now()
	s.Close()
	// The margins are what the test tells apart: a Close that waited for
	// the long poll would take its 60 s.
	assert.Less(t, time.Since(start), 30*time.Second)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the parked long poll outlived Close")
	}
	s.Close() // idempotent
	_, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	assert.Error(t, err)
}

func TestListenReportsAnAddressInUse(t *testing.T) {
	s := Start(t)
	_, err := Listen(WithAddr(s.Addr()))
	assert.Error(t, err)
	assert.Panics(t, func() { NewServer(WithAddr(s.Addr())) })
}

// AwaitRequests returns once the requests arrived, and with ctx's error
// when they do not.
func TestAwaitRequests(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.ErrorIs(t, s.AwaitRequests(ctx, RouteHealth, 1), context.Canceled, "no request yet")
	done := make(chan error, 1)
	go func() { done <- s.AwaitRequests(t.Context(), RouteHealth, 2) }()
	for range 2 {
		resp, err := h.c.Get(s.URL + "/health")
		require.NoError(t, err)
		resp.Body.Close()
	}
	require.NoError(t, <-done)
	require.NoError(t, s.AwaitRequests(t.Context(), RouteHealth, 2), "already there")
}

// TestFailNextWithBrokerUnavailable: a 503 injected with FailNext carries
// only the headers the test chose; BrokerUnavailable is the 2.x broker's
// own 503, Retry-After: 1 and its code, a timeout included (the broker
// sends no 504).
func TestFailNextWithBrokerUnavailable(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	s.FailNext(RoutePush, 1, http.StatusServiceUnavailable, 0)
	s.FailNextWith(RoutePush, 1, BrokerUnavailable("timeout"))
	s.FailNext(RoutePush, 1, http.StatusGatewayTimeout, 0)
	code := func(raw []byte) string {
		var e map[string]string
		require.NoError(t, json.Unmarshal(raw, &e))
		return e["code"]
	}
	st, hdr, raw := h.do("POST", "/api/v1/push", item{"items": []item{{"queue": "q", "payload": 1}}})
	assert.Equal(t, http.StatusServiceUnavailable, st)
	assert.Empty(t, hdr.Get("Retry-After"), "no header the test did not ask for")
	assert.Equal(t, "retry", code(raw))
	st, hdr, raw = h.do("POST", "/api/v1/push", item{"items": []item{{"queue": "q", "payload": 1}}})
	assert.Equal(t, http.StatusServiceUnavailable, st)
	assert.Equal(t, "1", hdr.Get("Retry-After"))
	assert.Equal(t, "timeout", code(raw))
	st, _, raw = h.do("POST", "/api/v1/push", item{"items": []item{{"queue": "q", "payload": 1}}})
	assert.Equal(t, http.StatusGatewayTimeout, st)
	assert.Equal(t, "gateway_timeout", code(raw), "a 504 is a proxy's")
	assert.Equal(t, Failure{Status: 503, Code: "standby", RetryAfter: time.Second}, BrokerUnavailable("standby"))
}
