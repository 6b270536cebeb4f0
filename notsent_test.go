package queen_test

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

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
