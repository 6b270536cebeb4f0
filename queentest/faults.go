package queentest

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Route names a kind of broker request, for fault injection and request
// counters. Every request of the HTTP API belongs to one Route (unknown
// paths belong to none).
type Route string

// The routes of the broker.
const (
	// RoutePush is POST /api/v1/push.
	RoutePush Route = "push"
	// RoutePop is every pop route: GET /api/v1/pop/queue/{queue},
	// .../partition/{partition} and the discovery GET /api/v1/pop.
	RoutePop Route = "pop"
	// RouteAck is POST /api/v1/ack.
	RouteAck Route = "ack"
	// RouteAckBatch is POST /api/v1/ack/batch.
	RouteAckBatch Route = "ack/batch"
	// RouteRenew is POST /api/v1/lease/{leaseId}/extend.
	RouteRenew Route = "lease/extend"
	// RouteTransaction is POST /api/v1/transaction.
	RouteTransaction Route = "transaction"
	// RouteConfigure is POST /api/v1/configure.
	RouteConfigure Route = "configure"
	// RouteQueues is every /api/v1/resources/queues route (list, get,
	// delete, depth).
	RouteQueues Route = "queues"
	// RouteSeek is both consumer-group seek routes.
	RouteSeek Route = "seek"
	// RouteGroups is every other /api/v1/consumer-groups route (list,
	// detail, lagging, delete, subscription).
	RouteGroups Route = "consumer-groups"
	// RouteDLQ is every dead-letter route: GET/DELETE /api/v1/dlq,
	// POST /api/v1/dlq/{id}/replay and POST /api/v1/messages/{pid}/{txn}/retry.
	RouteDLQ Route = "dlq"
	// RouteMessages is GET and DELETE
	// /api/v1/messages/{partitionId}/{transactionId}: the message view
	// (0.15.1) and the deletion of a message (0.15.1) or of its dead
	// letters (2.x).
	RouteMessages Route = "messages"
	// RouteFetch is POST /api/v1/fetch.
	RouteFetch Route = "fetch"
	// RouteHealth is GET /health.
	RouteHealth Route = "health"
)

type failRule struct {
	left int
	Failure
}

// Failure is an error answer that FailNextWith injects: HTTP Status with
// the 2.x error envelope {"error","code"}, and a Retry-After header only
// when RetryAfter > 0 (whole seconds as an integer, otherwise fractional
// seconds such as "0.05").
type Failure struct {
	Status int
	// Code is the envelope's code; "" picks it from the status as
	// FailNext does.
	Code       string
	RetryAfter time.Duration
}

// BrokerUnavailable is the 2.x broker's own answer when it cannot serve a
// request now: 503 with Retry-After: 1 and code, as its err_response
// writes them (handlers/raft.rs): "retry" (no quorum, a leader change or a
// retryable refusal), "no_leader", "timeout" (the request's deadline
// passed: a 503, never a 504), "outcome_unknown" (a forward whose outcome
// is open), "standby". A Retry-After of 1 s makes every client wait a
// second: inject it where a test needs the real header.
func BrokerUnavailable(code string) Failure {
	return Failure{Status: http.StatusServiceUnavailable, Code: code, RetryAfter: time.Second}
}

// faults holds the injected faults and the request counters.
type faults struct {
	mu      sync.Mutex
	counts  map[Route]int
	fails   map[Route][]*failRule
	latency map[Route]time.Duration
	drops   map[Route]int
	more    chan struct{} // closed at the next request, for AwaitRequests (nil: none waits)
}

func (f *faults) init() {
	f.counts = map[Route]int{}
	f.fails = map[Route][]*failRule{}
	f.latency = map[Route]time.Duration{}
	f.drops = map[Route]int{}
}

func (f *faults) count(r Route) {
	f.mu.Lock()
	f.counts[r]++
	if f.more != nil {
		close(f.more)
		f.more = nil
	}
	f.mu.Unlock()
}

func (f *faults) latencyOf(r Route) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.latency[r]
}

func (f *faults) takeFail(r Route) (failRule, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rules := f.fails[r]
	for len(rules) > 0 && rules[0].left <= 0 {
		rules = rules[1:]
	}
	f.fails[r] = rules
	if len(rules) == 0 {
		return failRule{}, false
	}
	rules[0].left--
	return *rules[0], true
}

func (f *faults) takeDrop(r Route) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.drops[r] <= 0 {
		return false
	}
	f.drops[r]--
	return true
}

// FailNext makes the next n requests of route r fail with HTTP status
// without being applied: the body is the 2.x error envelope
// {"error","code"} (code chosen from the status: 400 bad_request,
// 429 overloaded, 500 internal, 503 retry, 507 storage_full, ...), with a
// Retry-After header when retryAfter > 0 (whole seconds as an integer,
// otherwise fractional seconds such as "0.05"). A 503 carries exactly the
// header asked for: the real broker's Retry-After: 1 is BrokerUnavailable's
// (FailNextWith). Calls queue up: a second FailNext applies after the
// first one's n requests.
func (s *Server) FailNext(r Route, n int, status int, retryAfter time.Duration) {
	s.FailNextWith(r, n, Failure{Status: status, RetryAfter: retryAfter})
}

// FailNextWith is FailNext with the answer given as a Failure, its code
// included: FailNextWith(RoutePush, 1, BrokerUnavailable("timeout")) answers
// the next push as a 2.x broker whose deadline passed.
func (s *Server) FailNextWith(r Route, n int, f Failure) {
	if n <= 0 {
		return
	}
	if f.Code == "" {
		f.Code = codeForStatus(f.Status)
	}
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	s.faults.fails[r] = append(s.faults.fails[r], &failRule{left: n, Failure: f})
}

// AddLatency makes each request of route r wait d before it is handled
// (real time, whatever the Clock). A d of zero or less removes the latency.
func (s *Server) AddLatency(r Route, d time.Duration) {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	if d <= 0 {
		delete(s.faults.latency, r)
		return
	}
	s.faults.latency[r] = d
}

// DropNextResponses makes the next n requests of route r be applied by the
// broker, after which their connection is closed without an answer: the
// client sees a broken connection although the broker acted (a push stored,
// an ack applied, a pop leased).
func (s *Server) DropNextResponses(r Route, n int) {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	s.faults.drops[r] += max(n, 0)
}

// Requests returns how many requests of route r the broker received since
// it started or since ResetCounters, including failed, delayed and dropped
// ones.
func (s *Server) Requests(r Route) int {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	return s.faults.counts[r]
}

// AwaitRequests waits until Requests(r) is at least n, counted when a
// request arrives (a long poll counts before it is answered), or until ctx
// ends (then ctx.Err()): a test waits for a request, not for a time.
func (s *Server) AwaitRequests(ctx context.Context, r Route, n int) error {
	for {
		s.faults.mu.Lock()
		if s.faults.counts[r] >= n {
			s.faults.mu.Unlock()
			return nil
		}
		if s.faults.more == nil {
			s.faults.more = make(chan struct{})
		}
		more := s.faults.more
		s.faults.mu.Unlock()
		select {
		case <-more:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ResetCounters sets every request counter back to zero.
func (s *Server) ResetCounters() {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	s.faults.counts = map[Route]int{}
}

// RefuseConnections closes the listener and every open connection, so that
// new connections are refused for d; then the broker listens again on the
// same address. It returns at once. Calling it again during the window
// restarts the window; Close ends it. The broker keeps all its state
// (Restart also forgets what a real broker keeps only in memory).
func (s *Server) RefuseConnections(d time.Duration) {
	gen, ok := s.down()
	if !ok {
		return
	}
	s.log.Debug("queentest refusing connections", "for", d)
	s.upAfter(gen, d)
}

// down closes the listener and every open connection. It returns the
// listener generation that upAfter reopens, and false once Close began.
func (s *Server) down() (int, bool) {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if s.closing {
		return 0, false
	}
	s.gen++
	if s.ln != nil {
		_ = s.ln.Close()
		s.ln = nil
	}
	for c := range s.conns {
		_ = c.Close()
		delete(s.conns, c)
	}
	return s.gen, true
}

// upAfter listens again after d, unless a later down or Close happened
// meanwhile. It returns at once.
func (s *Server) upAfter(gen int, d time.Duration) {
	s.lmu.Lock()
	if s.closing {
		s.lmu.Unlock()
		return
	}
	s.bg.Add(1)
	s.lmu.Unlock()
	go func() {
		defer s.bg.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-s.closed:
			return
		}
		s.reopen(gen)
	}()
}

// reopen listens again on the Server's address unless a later refusal or
// Close happened meanwhile.
func (s *Server) reopen(gen int) {
	for attempt := 0; attempt < 100; attempt++ {
		s.lmu.Lock()
		if s.closing || s.stopped || s.gen != gen {
			s.lmu.Unlock()
			return
		}
		ln, err := net.Listen("tcp", s.addr)
		if err == nil {
			s.ln = ln
			s.bg.Add(1)
			s.lmu.Unlock()
			s.log.Debug("queentest listening again", "addr", s.addr)
			go s.serve(ln)
			return
		}
		s.lmu.Unlock()
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-t.C:
		case <-s.closed:
			t.Stop()
			return
		}
	}
	s.log.Error("queentest could not listen again", "addr", s.addr)
}

func formatRetryAfter(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10)
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}

// codeForStatus is the `code` of an injected failure. The 2.x broker's
// codes: 400 planner codes (bad_request), 413 name_too_long, 429
// overloaded, 503 retry (and no_leader, timeout, outcome_unknown, standby:
// BrokerUnavailable), 507 storage_full, 500 internal. The broker sends no
// 504; one injected here stands for a proxy's (gateway_timeout).
func codeForStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "bad_request"
	case http.StatusUnauthorized:
		return "unauthorized"
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusRequestEntityTooLarge:
		return "name_too_long"
	case http.StatusTooManyRequests:
		return "overloaded"
	case http.StatusInternalServerError:
		return "internal"
	case http.StatusServiceUnavailable:
		return "retry"
	case http.StatusGatewayTimeout:
		return "gateway_timeout"
	case http.StatusInsufficientStorage:
		return "storage_full"
	}
	return "injected"
}
