package queen_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

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
