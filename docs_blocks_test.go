package queen_test

// The code blocks of README.md and of the doc comments, copied token for
// token (TestDocCodeBlocksRun checks that they still are) into tests and
// Examples that run them against queentest and check what they did.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// errPermanent is the error the README's worker dead-letters.
var errPermanent = errors.New("permanent")

// docBroker starts queentest and returns its URL, a client of it and a
// ctx for the test.
func docBroker(t *testing.T) (*queentest.Server, string, *queen.Client, context.Context) {
	t.Helper()
	srv := queentest.Start(t)
	client, err := queen.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return srv, srv.URL, client, ctx
}

// docPush pushes payloads and fails the test on error.
func docPush(t *testing.T, ctx context.Context, qb *queen.QueueBuilder, payloads ...any) {
	t.Helper()
	if _, err := qb.Push(payloads...).Execute(ctx); err != nil {
		t.Fatal(err)
	}
}

// docLeft pops what the group can still read, without waiting.
func docLeft(t *testing.T, ctx context.Context, qb *queen.QueueBuilder) []*queen.Message {
	t.Helper()
	msgs, err := qb.Batch(100).Wait(false).Pop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// An explicit create with options (a block doc.go no longer has).
func TestDocCreateQueue(t *testing.T) {
	_, _, client, ctx := docBroker(t)

	_, err := client.Queue("orders").Config(queen.QueueConfig{
		LeaseTime:       queen.Ptr(30 * time.Second),
		RetryLimit:      queen.Ptr(5),
		DeadLetterQueue: queen.Ptr(true),
	}).Create().Execute(ctx)
	if err != nil {
		t.Fatal(err)
	}

	q, err := client.Admin().GetQueue(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if c := q.Config; c.LeaseTime == nil || *c.LeaseTime != 30*time.Second || *c.RetryLimit != 5 || !*c.DeadLetterQueue {
		t.Fatalf("config = %+v", c)
	}
}

// queue.go, QueueConfig: options set with Ptr.
func TestDocQueueConfigPtr(t *testing.T) {
	_, _, client, ctx := docBroker(t)
	cfg := queen.QueueConfig{RetryLimit: queen.Ptr(5), DeadLetterQueue: queen.Ptr(true), Retention: queen.Ptr(7 * 24 * time.Hour)}
	info, err := client.Queue("orders").Config(cfg).Create().Execute(ctx)
	if err != nil || *info.Config.RetryLimit != 5 || !*info.Config.DeadLetterQueue || *info.Config.Retention != 7*24*time.Hour {
		t.Fatalf("create = %+v, %v", info, err)
	}
}

// Order is the payload type of the doc's Decode example.
type Order struct {
	ID    int     `json:"id"`
	Total float64 `json:"total"`
}

// message.go, Decode.
func TestDocDecode(t *testing.T) {
	_, _, client, ctx := docBroker(t)
	docPush(t, ctx, client.Queue("orders"), map[string]any{"id": 7, "total": 12.5})
	msgs := docLeft(t, ctx, client.Queue("orders"))
	if len(msgs) != 1 {
		t.Fatalf("%d messages", len(msgs))
	}
	msg := msgs[0]

	order, err := queen.Decode[Order](msg)

	if err != nil || order != (Order{ID: 7, Total: 12.5}) {
		t.Fatalf("Decode = %+v, %v", order, err)
	}
}

// doc.go, "Quick start": the workers group reads the tasks pushed before it
// started, four handlers at once.
func TestDocConsume(t *testing.T) {
	srv, _, client, tctx := docBroker(t)
	for p := range 4 {
		docPush(t, tctx, client.Queue("tasks").Partition(fmt.Sprint("p", p)), 1, 2, 3)
	}
	ctx, cancel := context.WithCancel(tctx)
	defer cancel()
	var mu sync.Mutex
	handled := 0
	handle := func(*queen.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if handled++; handled == 12 {
			cancel()
		}
		return nil
	}

	err := client.Queue("tasks").Group("workers").
		SubscriptionMode(queen.SubscriptionModeAll). // read the tasks pushed before it started
		Concurrency(4).Each().
		Consume(ctx, func(ctx context.Context, m *queen.Message) error {
			return handle(m)
		}).
		Execute(ctx)

	if err != nil || handled != 12 || srv.LeasedCount("tasks", "workers") != 0 {
		t.Fatalf("err %v, handled %d, leased %d", err, handled, srv.LeasedCount("tasks", "workers"))
	}
}

// Bad input is told from a broker's refusal (ErrInvalidArgument).
func TestDocInvalidArgument(t *testing.T) {
	_, _, client, ctx := docBroker(t)
	classify := func(err error) error {
		if errors.Is(err, queen.ErrInvalidArgument) {
			return fmt.Errorf("a bug in the caller: %w", err) // retrying cannot help
		}
		return err
	}
	_, err := client.Queue("..").Pop(ctx)
	if got := classify(err); got == nil || got.Error() != "a bug in the caller: "+err.Error() {
		t.Fatalf("classify(%v) = %v", err, got)
	}
	if got := classify(context.Canceled); got != context.Canceled {
		t.Fatalf("classify(context.Canceled) = %v", got)
	}
}

// queue_builder.go, QueueBuilder: a chained pop.
func TestDocQueueBuilderChain(t *testing.T) {
	_, _, client, ctx := docBroker(t)
	docPush(t, ctx, client.Queue("orders"), 1, 2)

	msgs, err := client.Queue("orders").Group("billing").SubscriptionMode(queen.SubscriptionModeAll).Batch(10).Pop(ctx)

	if err != nil || len(msgs) != 2 {
		t.Fatalf("pop = %d messages, %v", len(msgs), err)
	}
}

// push.go, Item: a message with its own transaction id; pushing it again
// stores nothing new.
func TestDocItem(t *testing.T) {
	_, _, client, ctx := docBroker(t)
	order := struct {
		ID    string  `json:"id"`
		Total float64 `json:"total"`
	}{"order-1", 30}

	_, err := client.Queue("orders").Push(queen.Item{Payload: order, TransactionID: order.ID}).Execute(ctx)

	if err != nil {
		t.Fatal(err)
	}
	again, err := client.Queue("orders").Push(queen.Item{Payload: order, TransactionID: order.ID}).Execute(ctx)
	if err != nil || again[0].Status != queen.PushDuplicate || again[0].TransactionID != "order-1" {
		t.Fatalf("second push = %+v, %v", again, err)
	}
	if msgs := docLeft(t, ctx, client.Queue("orders")); len(msgs) != 1 {
		t.Fatalf("%d messages stored, want one", len(msgs))
	}
}

// transaction.go, TransactionBuilder: ack an order and push its invoice
// at once.
func TestDocTransaction(t *testing.T) {
	_, _, client, ctx := docBroker(t)
	docPush(t, ctx, client.Queue("orders").Partition("customer-42"), map[string]any{"total": 30})
	msgs, err := client.Queue("orders").Group("billing").SubscriptionMode(queen.SubscriptionModeAll).Wait(false).Pop(ctx)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("pop = %d, %v", len(msgs), err)
	}
	msg, invoice := msgs[0], map[string]any{"amount": 30}
	{
		_, err := client.Transaction().
			Ack(msg, queen.StatusCompleted, queen.AckOptions{ConsumerGroup: "billing"}).
			Queue("invoices").Partition(msg.Partition).Push(invoice).
			Commit(ctx)
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(docLeft(t, ctx, client.Queue("orders").Group("billing"))) != 0 {
		t.Fatal("the order was not acked")
	}
	inv := docLeft(t, ctx, client.Queue("invoices").Partition("customer-42"))
	if len(inv) != 1 || inv[0].Data["amount"] != 30.0 {
		t.Fatalf("invoices = %v", inv)
	}
}

// transaction.go, TransactionBuilder.Queue: two messages pushed in a
// transaction.
func TestDocTransactionQueue(t *testing.T) {
	_, _, client, ctx := docBroker(t)
	tx := client.Transaction()
	a, b := map[string]any{"n": 1}, map[string]any{"n": 2}

	tx.Queue("invoices").Partition("customer-42").Push(a, b)

	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := docLeft(t, ctx, client.Queue("invoices").Partition("customer-42")); len(got) != 2 {
		t.Fatalf("%d invoices, want 2", len(got))
	}
}

// fetch.go, ReadPartition: a partition read to its end.
func Example_docReadPartition() {
	srv := queentest.NewServer()
	defer srv.Close()
	ctx := context.Background()
	client, err := queen.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	if _, err := client.Queue("orders").Partition("customer-42").Push(map[string]int{"n": 1}, map[string]int{"n": 2}).Execute(ctx); err != nil {
		log.Fatal(err)
	}
	read := func() error {
		for rec, err := range client.Queue("orders").ReadPartition(ctx, "customer-42", 0) {
			if err != nil {
				return err
			}
			fmt.Println(rec.Offset, string(rec.Payload))
		}
		return nil
	}
	if err := read(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// 0 {"n":1}
	// 1 {"n":2}
}

// queentest/doc.go: a test's broker with a fake clock.
func TestDocQueentestStart(t *testing.T) {
	myClient := func(url string) *queen.Client {
		c, err := queen.New(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}

	srv := queentest.Start(t, queentest.WithClock(queentest.NewFakeClock(time.Now())))
	client := myClient(srv.URL)

	docPush(t, t.Context(), client.Queue("q"), 1)
	if got := docLeft(t, t.Context(), client.Queue("q")); len(got) != 1 {
		t.Fatalf("%d messages", len(got))
	}
}

// README.md, "Testing your code", pasted as it is.
func TestBilling(t *testing.T) {
	broker := queentest.Start(t) // an in-memory broker, closed when the test ends
	client, err := queen.New(broker.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())

	if _, err := client.Queue("orders").Push(map[string]any{"total": 30}).Execute(t.Context()); err != nil {
		t.Fatal(err)
	}
	msgs, err := client.Queue("orders").Wait(false).Pop(t.Context())
	if err != nil || len(msgs) != 1 {
		t.Fatalf("pop: %v, %d messages", err, len(msgs))
	}
}

// README.md, "A worker": four handlers at once until a SIGTERM (which the
// test sends itself once every task was handled), a permanent error
// dead-lettered, the others completed.
func TestDocREADMEWorker(t *testing.T) {
	srv, _, client, tctx := docBroker(t)
	for p := range 4 {
		docPush(t, tctx, client.Queue("tasks").Partition(fmt.Sprint("p", p)),
			map[string]any{"n": 2 * p}, map[string]any{"n": 2*p + 1, "bad": p == 2})
	}
	var mu sync.Mutex
	var done []int
	sigterm := func() {
		self, _ := os.FindProcess(os.Getpid())
		if err := self.Signal(syscall.SIGTERM); err != nil {
			t.Error(err)
		}
	}
	runTask := func(data map[string]any) error {
		mu.Lock()
		defer mu.Unlock()
		done = append(done, int(data["n"].(float64)))
		if len(done) == 8 {
			sigterm() // the deploy
		}
		if data["bad"] == true {
			return fmt.Errorf("task %v: %w", data["n"], errPermanent)
		}
		return nil
	}

	// Should the tasks never all run, stop the loop all the same (the
	// signal is caught by then: this waits 15 s), so that the test fails
	// rather than hangs.
	finished, watchdog := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watchdog)
		select {
		case <-finished:
		case <-time.After(15 * time.Second):
			sigterm()
		}
	}()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()

	err := client.Queue("tasks").
		Group("workers").
		SubscriptionMode(queen.SubscriptionModeAll).
		Concurrency(4).          // four handlers at once, on four partitions
		RenewLease(true, 10000). // renew every 10 s while a handler runs
		Each().
		Consume(ctx, func(ctx context.Context, task *queen.Message) error {
			err := runTask(task.Data) // nil: completed; an error: failed (it comes back)
			if errors.Is(err, errPermanent) {
				return queen.Poison(err) // straight to the dead-letter queue
			}
			return err
		}).
		Execute(ctx) // returns nil once ctx is cancelled

	close(finished)
	<-watchdog
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(done)
	if err != nil || !slices.Equal(done, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Fatalf("err %v, handled %v", err, done)
	}
	if n := srv.DLQCount("tasks"); n != 1 {
		t.Fatalf("%d dead letters, want the bad task", n)
	}
	if srv.LeasedCount("tasks", "workers") != 0 || len(docLeft(t, tctx, client.Queue("tasks").Group("workers"))) != 0 {
		t.Fatal("tasks left after the stop")
	}
}

// README.md, "The API: builders are values": builders derived from one
// kept builder are builders of their own, and the kept one is unchanged.
func TestDocBuildersAreValues(t *testing.T) {
	_, _, client, ctx := docBroker(t)

	orders := client.Queue("orders")    // kept, and shared by every request's goroutine
	a := orders.Partition("customer-1") // a new builder: orders names no partition
	b := orders.Partition("customer-2") // another one: a is still on customer-1

	docPush(t, ctx, a, "first")
	docPush(t, ctx, b, "second")
	docPush(t, ctx, orders, "default")
	for _, c := range []struct {
		qb   *queen.QueueBuilder
		want string
	}{{client.Queue("orders").Partition("customer-1"), `"first"`}, {client.Queue("orders").Partition("customer-2"), `"second"`},
		{client.Queue("orders").Partition("Default"), `"default"`}} {
		msgs := docLeft(t, ctx, c.qb)
		if len(msgs) != 1 || string(msgs[0].Raw) != c.want {
			t.Fatalf("%v holds %v, want only %s", c.qb, msgs, c.want)
		}
	}
}
