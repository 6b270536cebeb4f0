package queen_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// A worker that stops cleanly on Ctrl-C or SIGTERM: Execute returns nil once
// the signal's ctx ends; the handler running at that moment may finish (the
// grace period), and the messages popped but not started go back to the
// broker at once. Here the in-memory broker stands in for a real one, and
// the worker stops itself after three orders, as a signal would stop it.
func Example_gracefulShutdown() {
	srv := queentest.NewServer()
	defer srv.Close()
	client, err := queen.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	_, err = client.Queue("orders").Partition("customer-42").
		Push(map[string]any{"id": 1}, map[string]any{"id": 2}, map[string]any{"id": 3}).
		Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}

	handled := 0
	err = client.Queue("orders").
		Group("shipping").
		SubscriptionMode(queen.SubscriptionModeAll).
		Each().
		Consume(ctx, func(ctx context.Context, msg *queen.Message) error {
			fmt.Println("shipping order", msg.Data["id"])
			if handled++; handled == 3 {
				stop() // what Ctrl-C or SIGTERM does
			}
			return nil
		}).
		GracePeriod(5 * time.Second). // running handlers may finish after a stop
		Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stopped cleanly; leased:", srv.LeasedCount("orders", "shipping"))
	// Output:
	// shipping order 1
	// shipping order 2
	// shipping order 3
	// stopped cleanly; leased: 0
}

// Testing a handler with queentest: push what the test needs, run the loop
// with a Limit so that it ends by itself, then look at the broker. (A
// message that fails when the Limit leaves no call to retry it goes back
// to the broker.)
func Example_testWithQueentest() {
	srv := queentest.NewServer(queentest.WithDefaultQueueConfig(func() queentest.QueueConfig {
		c := queentest.DefaultQueueConfig()
		c.RetryDelay = 0 // a failed message is retried at once
		return c
	}()))
	defer srv.Close()
	client, err := queen.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background())
	ctx := context.Background()

	_, err = client.Queue("invoices").Push(map[string]any{"amount": 10}, map[string]any{"amount": -5}).Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}

	// The handler under test refuses negative amounts.
	var billed atomic.Int64
	handle := func(ctx context.Context, msg *queen.Message) error {
		amount := msg.Data["amount"].(float64)
		if amount < 0 {
			return errors.New("negative amount")
		}
		billed.Add(int64(amount))
		return nil
	}

	err = client.Queue("invoices").Each().Limit(2).Consume(ctx, handle).Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("billed:", billed.Load())
	fmt.Println("leased:", srv.LeasedCount("invoices", ""))
	back, err := client.Queue("invoices").Wait(false).Pop(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("back for a retry:", back[0].Data["amount"])
	// Output:
	// billed: 10
	// leased: 0
	// back for a retry: -5
}

// Deciding each outcome: errors that retrying cannot fix go to the
// dead-letter queue at once, the others are failed (and retried).
func ExampleConsumeBuilder_OnError() {
	srv := queentest.NewServer()
	defer srv.Close()
	client, err := queen.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background())
	ctx := context.Background()

	errNoSuchAddress := errors.New("no such address")
	_, err = client.Queue("emails").Push(map[string]any{"to": "nobody@invalid"}).Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}

	err = client.Queue("emails").Each().Limit(1).
		Consume(ctx, func(ctx context.Context, msg *queen.Message) error {
			return fmt.Errorf("send to %v: %w", msg.Data["to"], errNoSuchAddress)
		}).
		OnError(func(ctx context.Context, msg *queen.Message, err error) queen.Outcome {
			if errors.Is(err, errNoSuchAddress) {
				return queen.DLQ(err) // trying again cannot help
			}
			return queen.Fail(err)
		}).
		Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("dead letters:", srv.DLQCount("emails"))
	// Output:
	// dead letters: 1
}

// The handler gets the whole batch: one call, one ack, per pop.
func ExampleQueueBuilder_ConsumeBatch() {
	srv := queentest.NewServer()
	defer srv.Close()
	client, err := queen.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background())
	ctx := context.Background()

	rows := make([]any, 250)
	for i := range rows {
		rows[i] = map[string]any{"row": i}
	}
	if _, err := client.Queue("events").Push(rows...).Execute(ctx); err != nil {
		log.Fatal(err)
	}

	err = client.Queue("events").Batch(100).Limit(250).
		ConsumeBatch(ctx, func(ctx context.Context, msgs []*queen.Message) error {
			fmt.Println("writing", len(msgs), "rows")
			return nil
		}).
		Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// writing 100 rows
	// writing 100 rows
	// writing 50 rows
}

// A webhook sender tells the receiver which attempt a delivery is in (an
// X-Attempt header): msg.Attempt() is 1 at the first call of the handler
// and one more at each retry after an error, which the loop makes where
// the message failed (its partition kept) after the queue's RetryDelay,
// up to its RetryLimit. A receiver error that retrying cannot fix (a 4xx)
// goes to the dead-letter queue at once. Here the receiver answers 503
// twice, then 200.
func ExampleMessage_Attempt() {
	srv := queentest.NewServer()
	defer srv.Close()
	client, err := queen.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background())
	ctx := context.Background()

	var calls atomic.Int32
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("receiver got attempt", r.Header.Get("X-Attempt"))
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer receiver.Close()

	_, err = client.Queue("webhooks").
		Config(queen.QueueConfig{RetryLimit: queen.Ptr(5), RetryDelay: queen.Ptr(10 * time.Millisecond)}).
		Create().Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Queue("webhooks").Push(map[string]any{"event": "order.paid"}).Execute(ctx); err != nil {
		log.Fatal(err)
	}

	err = client.Queue("webhooks").
		Limit(3). // three calls of the handler, and the loop ends
		Consume(ctx, func(ctx context.Context, msg *queen.Message) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, receiver.URL, bytes.NewReader(msg.Raw))
			if err != nil {
				return queen.Poison(err)
			}
			req.Header.Set("X-Attempt", strconv.Itoa(msg.Attempt()))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err // the network: try again
			}
			resp.Body.Close()
			switch {
			case resp.StatusCode >= 500:
				return fmt.Errorf("receiver answered %d", resp.StatusCode) // try again
			case resp.StatusCode >= 400:
				return queen.Poison(fmt.Errorf("receiver refused: %d", resp.StatusCode))
			}
			return nil
		}).
		Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// receiver got attempt 1
	// receiver got attempt 2
	// receiver got attempt 3
}
