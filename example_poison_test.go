package queen_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// A payload that does not decode can never succeed: the handler returns
// it as Poison, and the message is dead-lettered at once, with the decode
// error as its reason, whatever retries the queue allows.
func ExamplePoison() {
	srv := queentest.NewServer()
	defer srv.Close()
	client, err := queen.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background())
	ctx := context.Background()

	type Order struct{ ID int }
	_, err = client.Queue("orders").Push(map[string]any{"ID": 1}, map[string]any{"ID": "two"}).Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}

	err = client.Queue("orders").Limit(2).
		Consume(ctx, func(ctx context.Context, msg *queen.Message) error {
			o, err := queen.Decode[Order](msg)
			if err != nil {
				return queen.Poison(err)
			}
			fmt.Println("billed order", o.ID)
			return nil
		}).
		Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}
	page, err := client.Admin().ListDLQ(ctx, "orders", queen.DLQListOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range page.Messages {
		fmt.Printf("dead letter %s, decode error kept: %t\n", d.Payload, strings.HasPrefix(d.Error, "queen: decode message"))
	}
	// Output:
	// billed order 1
	// dead letter {"ID":"two"}, decode error kept: true
}
