package integration

import (
	"context"
	"testing"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queencontainer"
)

// The README's queencontainer block, token for token, then a push and a pop
// through the container it started. It runs for real on the container path
// of CI (.ci/containers sets QUEEN_IMAGE to the repository's image); with no
// engine, no image, or QUEEN_IMAGE=none, queencontainer.Run skips it and
// says why; with QUEEN_URL set it runs against that broker, no Docker asked.
func TestOrders(t *testing.T) {
	broker := queencontainer.Run(t) // QUEEN_URL's broker, else a container (skipped when no Docker engine answers; removed at the end)
	client, err := queen.New(broker.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	checkOrders(t, client) // the same checks as on queentest
}

// checkOrders pushes an order and pops it back.
func checkOrders(t *testing.T, client *queen.Client) {
	t.Helper()
	q := unique("readme-container")
	if _, err := client.Queue(q).Push(map[string]any{"total": 30}).Execute(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = client.Queue(q).Delete().Execute(context.Background()) })
	// A waiting pop: a broker may answer the push before a pop sees it.
	msgs, err := client.Queue(q).Batch(10).Wait(true).TimeoutMillis(shortWaitMs).Pop(t.Context())
	if err != nil || len(msgs) != 1 || msgs[0].Data["total"] != 30.0 {
		t.Fatalf("pop through the container: %v, %+v", err, msgs)
	}
}
