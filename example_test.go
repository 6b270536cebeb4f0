package queen_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// The examples run against queentest, the in-memory broker of this module;
// with a real broker only the URL given to queen.New changes.

// Push one message per payload: any JSON value travels as it is.
func ExampleQueueBuilder_Push() {
	broker := queentest.NewServer()
	defer broker.Close()
	ctx := context.Background()
	client, err := queen.New(broker.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)

	results, err := client.Queue("orders").Partition("customer-42").
		Push(map[string]any{"id": 1, "total": 12.5}, "a plain string", 42).
		Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range results {
		fmt.Println(r.Index, r.Status, r.Stored())
	}
	// Output:
	// 0 queued true
	// 1 queued true
	// 2 queued true
}

// A builder is a value: a service keeps one per queue and derives a pinned
// one per request, from as many goroutines as it likes. Nothing changes
// the kept one.
func ExampleQueueBuilder_Partition() {
	broker := queentest.NewServer()
	defer broker.Close()
	ctx := context.Background()
	client, err := queen.New(broker.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)

	orders := client.Queue("orders") // kept
	customers := []string{"customer-1", "customer-2", "customer-3"}
	var wg sync.WaitGroup
	for _, customer := range customers {
		wg.Go(func() {
			order := map[string]string{"customer": customer}
			if _, err := orders.Partition(customer).Push(order).Execute(ctx); err != nil {
				log.Print(err)
			}
		})
	}
	wg.Wait()

	for _, customer := range customers {
		msgs, err := orders.Partition(customer).Wait(false).Pop(ctx)
		if err != nil {
			log.Fatal(err)
		}
		for _, m := range msgs {
			fmt.Println(m.Partition, m.Data["customer"])
		}
	}
	fmt.Println(orders)
	// Output:
	// customer-1 customer-1
	// customer-2 customer-2
	// customer-3 customer-3
	// queue=orders
}

// A retried push is safe: with the same transaction id, the broker answers
// "duplicate" instead of storing the message twice.
func ExamplePushBuilder_TransactionID() {
	broker := queentest.NewServer()
	defer broker.Close()
	ctx := context.Background()
	client, err := queen.New(broker.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)

	for range 2 {
		res, err := client.Queue("payments").Push(map[string]int{"cents": 995}).
			TransactionID("payment-7731").Execute(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res[0].Status, res[0].TransactionID)
	}
	// Output:
	// queued payment-7731
	// duplicate payment-7731
}

// Pop takes a batch and leases it; each message is then acked: ok true is
// completed, false is failed (it comes back, up to the queue's retry limit).
// Acks one by one hold here only because the failure is the pop's last
// message: a failed ack ends its partition's lease, and later acks under it
// are refused. Settle a pop with one SettleBatch, as Example_quickStart does.
func ExampleQueueBuilder_Pop() {
	broker := queentest.NewServer()
	defer broker.Close()
	ctx := context.Background()
	client, err := queen.New(broker.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	if _, err := client.Queue("orders").Push(map[string]any{"total": 30}, map[string]any{"total": 0}).Execute(ctx); err != nil {
		log.Fatal(err)
	}

	msgs, err := client.Queue("orders").
		Group("billing").
		SubscriptionMode(queen.SubscriptionModeAll). // a new group starts at the tail unless told otherwise
		Batch(10).
		Wait(false). // answer at once when there is nothing
		Pop(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, msg := range msgs {
		ok := msg.Data["total"].(float64) > 0
		res, err := client.Ack(ctx, msg, ok, queen.AckOptions{ConsumerGroup: "billing", Error: "empty order"})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(msg.Data["total"], ok, res.Success)
	}
	// Output:
	// 30 true true
	// 0 false true
}

// Settle gives any of the four outcomes; here a message that can never
// succeed goes straight to the dead-letter queue, with the reason.
func ExampleClient_Settle() {
	broker := queentest.NewServer()
	defer broker.Close()
	ctx := context.Background()
	client, err := queen.New(broker.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	if _, err := client.Queue("emails").Config(queen.QueueConfig{DeadLetterQueue: queen.Ptr(true)}).Create().Execute(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Queue("emails").Push(map[string]string{"to": "nobody@invalid"}).Execute(ctx); err != nil {
		log.Fatal(err)
	}

	msgs, err := client.Queue("emails").Wait(false).Pop(ctx)
	if err != nil {
		log.Fatal(err)
	}
	res, err := client.Settle(ctx, msgs[0], queen.StatusDLQ, queen.AckOptions{Error: "no such domain"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("dead-lettered:", res.DLQ)
	// Output:
	// dead-lettered: true
}

// SettleBatch settles a whole pop in one request, one outcome per message.
func ExampleClient_SettleBatch() {
	broker := queentest.NewServer()
	defer broker.Close()
	ctx := context.Background()
	client, err := queen.New(broker.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	if _, err := client.Queue("jobs").Push(1, 2, 3).Execute(ctx); err != nil {
		log.Fatal(err)
	}

	msgs, err := client.Queue("jobs").Batch(3).Wait(false).Pop(ctx)
	if err != nil {
		log.Fatal(err)
	}
	acks := []queen.Settlement{
		{Message: msgs[0], Status: queen.StatusCompleted},
		{Message: msgs[1], Status: queen.StatusRetry}, // not started: give it back, no retry spent
		{Message: msgs[2], Status: queen.StatusRetry},
	}
	results, err := client.SettleBatch(ctx, acks, queen.AckOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(results), "results")

	again, err := client.Queue("jobs").Batch(3).Wait(false).Pop(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range again {
		n, _ := queen.Decode[int](m)
		fmt.Println("back:", n)
	}
	// Output:
	// 3 results
	// back: 2
	// back: 3
}

// Decode reads a payload into any type; payloads that are not JSON objects
// (numbers, strings, arrays) are kept too.
func ExampleDecode() {
	broker := queentest.NewServer()
	defer broker.Close()
	ctx := context.Background()
	client, err := queen.New(broker.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	type order struct {
		ID    int     `json:"id"`
		Total float64 `json:"total"`
	}
	if _, err := client.Queue("orders").Push(order{ID: 7, Total: 99.5}, []string{"a", "b"}).Execute(ctx); err != nil {
		log.Fatal(err)
	}

	msgs, err := client.Queue("orders").Batch(2).Wait(false).CommitOnDelivery(true).Pop(ctx)
	if err != nil {
		log.Fatal(err)
	}
	o, err := queen.Decode[order](msgs[0])
	if err != nil {
		log.Fatal(err)
	}
	tags, err := queen.Decode[[]string](msgs[1])
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%+v %v %s\n", o, tags, msgs[1].Raw)
	// Output:
	// {ID:7 Total:99.5} [a b] ["a","b"]
}

// Bad options are refused before anything is sent, with an error that
// names the problem and matches ErrInvalidArgument.
func ExampleErrInvalidArgument() {
	client, err := queen.New("http://localhost:6632")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background())

	_, err = client.Queue("prices").Conflation(true).Pop(context.Background())
	fmt.Println(errors.Is(err, queen.ErrConflationNeedsGroup), errors.Is(err, queen.ErrInvalidArgument))
	// Output:
	// true true
}
