package queen_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// A refusal whose body is not the broker's JSON envelope (a proxy's page,
// say) says its status and content type and quotes the start of the body,
// on one line; the whole body stays on BrokerError.Body.
func TestBrokerErrorQuotesANonJSONBody(t *testing.T) {
	page := "Service Unavailable\n\n" + strings.Repeat("upstream connect error or disconnect/reset before headers. ", 20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, page)
	}))
	t.Cleanup(srv.Close)
	c, err := queen.New(srv.URL, queen.WithRetryPolicy(queen.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	_, err = c.Queue("q").Push(1).Execute(t.Context())
	var be *queen.BrokerError
	if !errors.As(err, &be) {
		t.Fatalf("push = %v; want a *BrokerError", err)
	}
	if !errors.Is(err, queen.ErrOutcomeUnknown) {
		t.Errorf("push = %v; a 500 may follow applying: want ErrOutcomeUnknown", err)
	}
	msg := be.Error()
	prefix := "queen: broker answered 500 to POST " + srv.URL + "/api/v1/push (text/plain; charset=utf-8): Service Unavailable upstream connect error"
	if !strings.HasPrefix(msg, prefix) || !strings.HasSuffix(msg, "…") || strings.Contains(msg, "\n") {
		t.Errorf("message %q; want it to start %q, on one line, cut with …", msg, prefix)
	}
	if n := len(be.Message); n > 200+len("…") {
		t.Errorf("the excerpt has %d bytes", n)
	}
	if string(be.Body) != page || be.Status != 500 || be.ContentType != "text/plain; charset=utf-8" {
		t.Errorf("BrokerError = %+v", be)
	}

	// The broker's envelope: its code and message, no content type.
	srv2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":"queue name too long","code":"name_too_long"}`)
	}))
	t.Cleanup(srv2.Close)
	c2, err := queen.New(srv2.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c2.Close(context.Background()) })
	_, err = c2.Queue("q").Push(1).Execute(t.Context())
	if want := "queen: broker answered 400 to POST " + srv2.URL + "/api/v1/push (name_too_long): queue name too long"; err == nil || err.Error() != want {
		t.Errorf("message %v; want %q", err, want)
	}
}

// Each refusal of a message before the wire says what is wrong with it.
func TestNotAckableSaysWhy(t *testing.T) {
	c, err := queen.New("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	ctx := t.Context()
	noLease := &queen.Message{ID: "m", TransactionID: "t", PartitionID: "p"}
	_, ackNil := c.Ack(ctx, nil, true, queen.AckOptions{})
	_, ackEmpty := c.Ack(ctx, &queen.Message{}, true, queen.AckOptions{})
	_, renewNil := c.Renew(ctx, nil)
	_, renewNoLease := c.Renew(ctx, noLease)
	_, txEmpty := c.Transaction().Ack(&queen.Message{}, queen.StatusCompleted).Commit(ctx)
	for _, tc := range []struct {
		name     string
		err      error
		want     string
		unwanted []string
	}{
		{"Ack(nil)", ackNil, "ack 0: queen: message cannot be acknowledged: nil message", []string{"transactionId"}},
		{"Ack(no ids)", ackEmpty, "ack 0: queen: message cannot be acknowledged: missing transactionId or partitionId", nil},
		{"Renew(nil)", renewNil, "message 0: queen: message cannot be acknowledged: nil message", []string{"delivery", "transactionId"}},
		{"Renew(no lease)", renewNoLease, "message 0: queen: message cannot be acknowledged: no lease (committed on delivery?)", []string{"transactionId"}},
		{"Transaction Ack(no ids)", txEmpty, "missing transactionId or partitionId", nil},
	} {
		if !errors.Is(tc.err, queen.ErrNotAckable) || !errors.Is(tc.err, queen.ErrInvalidArgument) {
			t.Errorf("%s = %v; want ErrNotAckable", tc.name, tc.err)
			continue
		}
		if !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %q does not say %q", tc.name, tc.err, tc.want)
		}
		for _, u := range tc.unwanted {
			if strings.Contains(tc.err.Error(), u) {
				t.Errorf("%s: %q speaks of %q", tc.name, tc.err, u)
			}
		}
	}
}

// A payload that does not decode names the message by its id and its
// transaction id.
func TestDecodeErrorNamesTheMessage(t *testing.T) {
	m := &queen.Message{ID: "0192-msg", TransactionID: "txn-7", Raw: json.RawMessage(`"not a number"`)}
	_, err := queen.Decode[int](m)
	if err == nil || !strings.Contains(err.Error(), `decode message "0192-msg" (transactionId "txn-7"): `) {
		t.Errorf("Decode = %v", err)
	}
	_, err = queen.Decode[int](&queen.Message{TransactionID: "txn-8", Raw: json.RawMessage(`[]`)})
	if err == nil || !strings.Contains(err.Error(), `decode message with transactionId "txn-8": `) {
		t.Errorf("Decode of a message without an id = %v", err)
	}
	_, err = queen.Decode[int](&queen.Message{Raw: json.RawMessage(`[]`)})
	if err == nil || !strings.Contains(err.Error(), "decode message without an id: ") || strings.Contains(err.Error(), `""`) {
		t.Errorf("Decode of a message without ids = %v", err)
	}
	if !utf8.ValidString(err.Error()) {
		t.Error("invalid UTF-8")
	}
}

// A call none of whose attempts reached the broker fails with ErrNotSent,
// never ErrOutcomeUnknown: nothing was stored or applied.

func TestNotSentAgainstRefusingBroker(t *testing.T) {
	srv := queentest.Start(t)
	ctx := t.Context()
	msg := leasedTask(t, retryingClient(t, srv.URL))
	srv.RefuseConnections(time.Hour) // the listener is down; Close ends the window
	// A client with no connection yet: a request written on a connection
	// the broker closed as the window began may have reached it (its
	// outcome is unknown), and that is not what this test is about.
	c := retryingClient(t, srv.URL)

	check := func(name string, err error) {
		t.Helper()
		if !errors.Is(err, queen.ErrNotSent) || errors.Is(err, queen.ErrOutcomeUnknown) {
			t.Errorf("%s: %v; want ErrNotSent only", name, err)
		}
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "dial" {
			t.Errorf("%s: %v; want the dial error kept", name, err)
		}
	}
	_, err := c.Queue("tasks").Partition("p").Push(map[string]int{"n": 2}).Execute(ctx)
	check("Push.Execute", err)
	_, err = c.Ack(ctx, msg, true, queen.AckOptions{ConsumerGroup: "workers"})
	check("Ack", err)
	_, err = c.SettleBatch(ctx, []queen.Settlement{{Message: msg, Status: queen.StatusCompleted}}, queen.AckOptions{ConsumerGroup: "workers"})
	check("SettleBatch", err)
	_, err = c.Transaction().Queue("results").Push(map[string]int{"n": 3}).Commit(ctx)
	check("Transaction.Commit", err)
}

// With nothing listening at all (a closed listener): the same, and the
// error says how many attempts were refused.
func TestNotSentClosedListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	_ = ln.Close()
	c := retryingClient(t, url)
	_, err = c.Queue("q").Push(map[string]int{"n": 1}).Execute(t.Context())
	if !errors.Is(err, queen.ErrNotSent) {
		t.Fatalf("Execute: %v; want ErrNotSent", err)
	}
	t.Log(err)
}

// Calls the broker does not apply idempotently (Transaction.Commit,
// Admin.ReplayDLQ) are not retried once they may have reached the broker:
// the outcome is reported unknown, never guessed.

// retryingClient is a client for url that retries as a user's would (the
// default four attempts), quickly.
func retryingClient(t *testing.T, url string) *queen.Client {
	t.Helper()
	c, err := queen.New(url, queen.WithRetryPolicy(queen.RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(t.Context()) })
	return c
}

// leasedTask pushes one task to queue "tasks" and pops it for group
// "workers".
func leasedTask(t *testing.T, c *queen.Client) *queen.Message {
	t.Helper()
	mustPush(t, c, "tasks", "p", map[string]int{"n": 1})
	msgs := popAll(t, c, "tasks", "workers")
	if len(msgs) != 1 {
		t.Fatalf("popped %d", len(msgs))
	}
	return msgs[0]
}

func TestCommitAnswerLostIsOutcomeUnknown(t *testing.T) {
	srv := queentest.Start(t)
	c := retryingClient(t, srv.URL)
	ctx := t.Context()
	msg := leasedTask(t, c)

	srv.ResetCounters()
	srv.DropNextResponses(queentest.RouteTransaction, 1)
	res, err := c.Transaction().
		Queue("results").Partition("p").Push(queen.Item{Payload: map[string]string{"done": "1"}, TransactionID: "result-1"}).
		Ack(msg, queen.StatusCompleted, queen.AckOptions{ConsumerGroup: "workers"}).
		Commit(ctx)
	if !errors.Is(err, queen.ErrOutcomeUnknown) {
		t.Fatalf("Commit = %+v, %v; want ErrOutcomeUnknown", res, err)
	}
	var te *queen.TransactionError
	if res != nil || errors.Is(err, queen.ErrRolledBack) || errors.As(err, &te) {
		t.Fatalf("Commit = %+v, %v; an unknown outcome is not a rollback", res, err)
	}
	if !strings.HasPrefix(err.Error(), "queen: outcome unknown: transport: POST "+srv.URL+"/api/v1/transaction: ") {
		t.Fatalf("message %q", err)
	}
	if n := srv.Requests(queentest.RouteTransaction); n != 1 {
		t.Fatalf("the transaction was sent %d times, want once", n)
	}

	// It was applied: the push is stored once and the task is settled.
	read, err := c.Queue("results").Fetch(ctx, []string{"p"})
	if err != nil {
		t.Fatal(err)
	}
	if recs := read["p"].Records; len(recs) != 1 || recs[0].TransactionID != "result-1" {
		t.Fatalf("results = %+v; want the pushed message once", read["p"])
	}
	if srv.LeasedCount("tasks", "workers") != 0 {
		t.Fatal("the task is still leased: the ack was not applied")
	}
	if got := popAll(t, c, "tasks", "workers"); len(got) != 0 {
		t.Fatalf("acked task came back: %v", payloads(got))
	}
}

func TestReplayDLQAnswerLostIsOutcomeUnknown(t *testing.T) {
	srv := queentest.Start(t)
	c := retryingClient(t, srv.URL)
	ctx := t.Context()
	msg := leasedTask(t, c)
	if _, err := c.Transaction().Ack(msg, queen.StatusDLQ, queen.AckOptions{ConsumerGroup: "workers"}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	page, err := c.Admin().ListDLQ(ctx, "tasks", queen.DLQListOptions{})
	if err != nil || len(page.Messages) != 1 {
		t.Fatalf("dlq = %+v, %v", page, err)
	}
	dl := page.Messages[0]

	srv.ResetCounters()
	srv.DropNextResponses(queentest.RouteDLQ, 1)
	rr, err := c.Admin().ReplayDLQ(ctx, dl)
	if !errors.Is(err, queen.ErrOutcomeUnknown) {
		t.Fatalf("ReplayDLQ = %+v, %v; want ErrOutcomeUnknown", rr, err)
	}
	var be *queen.BrokerError
	if errors.As(err, &be) {
		t.Fatalf("ReplayDLQ = %v; want no broker answer (a retry's 404 says the replay did not happen)", err)
	}
	if n := srv.Requests(queentest.RouteDLQ); n != 1 {
		t.Fatalf("the replay was sent %d times, want once", n)
	}

	// It was applied: the row left the DLQ and the message is back.
	if n := srv.DLQCount("tasks"); n != 0 {
		t.Fatalf("DLQCount = %d; the replay was not applied", n)
	}
	back := popAll(t, c, "tasks", "workers")
	if len(back) != 1 || back[0].TransactionID != "dlq:"+dl.ID {
		t.Fatalf("back = %v", back)
	}
}

// The answers the broker sends without applying (429, 503) are still
// retried; the others are final, and those that may follow an applied
// request say the outcome is unknown.
func TestNonIdempotentCallsAndStatuses(t *testing.T) {
	const committed = `{"transactionId":"t","success":true,"results":[{"index":0,"type":"push","success":true,"transactionId":"x","messageId":"m","queueName":"q"}]}`
	const replayed = `{"success":true,"result":"moved","queue":"q","partition":"p"}`
	envelope := func(code string) string { return `{"error":"injected","code":"` + code + `"}` }
	calls := map[string]func(*queen.Client) error{
		"commit": func(c *queen.Client) error {
			_, err := c.Transaction().Queue("q").Push(1).Commit(t.Context())
			return err
		},
		"replay": func(c *queen.Client) error {
			_, err := c.Admin().ReplayDLQ(t.Context(), queen.DeadLetter{ID: "row"})
			return err
		},
	}
	tests := []struct {
		status  int
		body    string
		retried bool
		unknown bool
	}{
		{http.StatusServiceUnavailable, envelope("retry"), true, false},
		{http.StatusServiceUnavailable, envelope("no_leader"), true, false},
		{http.StatusTooManyRequests, envelope("overloaded"), true, false},
		{http.StatusServiceUnavailable, envelope("outcome_unknown"), false, true},
		{http.StatusInternalServerError, envelope("internal"), false, true},
		{http.StatusBadGateway, `bad gateway`, false, true},
		{http.StatusGatewayTimeout, `gateway timeout`, false, true},
		{http.StatusInsufficientStorage, envelope("storage_full"), false, false},
		{http.StatusBadRequest, envelope("bad_request"), false, false},
	}
	for name, call := range calls {
		for _, tc := range tests {
			t.Run(name+" "+strconv.Itoa(tc.status)+" "+tc.body, func(t *testing.T) {
				var mu sync.Mutex
				hits := 0
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.ReadAll(r.Body)
					mu.Lock()
					hits++
					first := hits == 1
					mu.Unlock()
					if first {
						w.WriteHeader(tc.status)
						_, _ = io.WriteString(w, tc.body)
						return
					}
					if name == "commit" {
						_, _ = io.WriteString(w, committed)
						return
					}
					_, _ = io.WriteString(w, replayed)
				}))
				t.Cleanup(srv.Close)
				err := call(retryingClient(t, srv.URL))
				mu.Lock()
				defer mu.Unlock()
				if tc.retried {
					if err != nil || hits != 2 {
						t.Fatalf("err = %v after %d requests; want success on the retry", err, hits)
					}
					return
				}
				var be *queen.BrokerError
				if hits != 1 || !errors.As(err, &be) || be.Status != tc.status {
					t.Fatalf("err = %v after %d requests; want the broker's %d, not retried", err, hits, tc.status)
				}
				if got := errors.Is(err, queen.ErrOutcomeUnknown); got != tc.unknown {
					t.Fatalf("errors.Is(%v, ErrOutcomeUnknown) = %v, want %v", err, got, tc.unknown)
				}
				if tc.unknown && !strings.HasPrefix(err.Error(), "queen: outcome unknown: broker answered ") {
					t.Fatalf("message %q", err)
				}
			})
		}
	}
}

// Idempotent calls keep retrying what the broker applied: a push whose
// answer was lost is sent again and answered as a duplicate.
func TestIdempotentCallsStillRetryAfterSend(t *testing.T) {
	srv := queentest.Start(t)
	c := retryingClient(t, srv.URL)
	srv.DropNextResponses(queentest.RoutePush, 1)
	res, err := c.Queue("q").Push(queen.Item{Payload: 1, TransactionID: "once"}).Execute(t.Context())
	if err != nil || len(res) != 1 {
		t.Fatalf("push = %+v, %v", res, err)
	}
	if n := srv.Requests(queentest.RoutePush); n != 2 {
		t.Fatalf("%d push requests, want the lost one and its retry", n)
	}
}
