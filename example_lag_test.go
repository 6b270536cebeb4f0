package queen_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// A group's lag on a queue, partition by partition, then the wait until a
// worker of the group has handled everything: a batch job's "done", a
// deployment's "safe to stop the old version".
func ExampleAdmin_AwaitDrained() {
	srv := queentest.NewServer()
	defer srv.Close()
	ctx := context.Background()
	client, err := queen.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	for _, p := range []string{"customer-1", "customer-2"} {
		if _, err := client.Queue("invoices").Partition(p).Push(map[string]int{"n": 1}, map[string]int{"n": 2}).Execute(ctx); err != nil {
			log.Fatal(err)
		}
	}

	lag, err := client.Admin().Lag(ctx, "invoices", "billing")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("pending:", lag.Pending)
	for _, p := range lag.Partitions {
		fmt.Println(p.Partition, p.Pending)
	}

	worker := make(chan error, 1)
	go func() {
		worker <- client.Queue("invoices").Group("billing").SubscriptionMode(queen.SubscriptionModeAll).
			Limit(4).
			Each().
			Consume(ctx, func(ctx context.Context, msg *queen.Message) error { return nil }).
			Execute(ctx)
	}()
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	lag, err = client.Admin().AwaitDrained(wait, "invoices", "billing", queen.DrainOptions{Interval: 20 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	if err := <-worker; err != nil {
		log.Fatal(err)
	}
	fmt.Println("drained, pending:", lag.Pending)
	// Output:
	// pending: 4
	// customer-1 2
	// customer-2 2
	// drained, pending: 0
}
