package queen_test

import (
	"context"
	"fmt"
	"log"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// Every dead letter of a queue, page after page (of 100).
func ExampleAdmin_DeadLetters() {
	srv := queentest.NewServer()
	defer srv.Close()
	ctx := context.Background()
	client, err := queen.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	_, err = client.Queue("emails").Push(map[string]string{"to": "a@invalid"}, map[string]string{"to": "b@invalid"},
		map[string]string{"to": "c@invalid"}).Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}
	msgs, err := client.Queue("emails").Batch(3).Pop(ctx)
	if err != nil {
		log.Fatal(err)
	}
	var acks []queen.Settlement
	for _, m := range msgs {
		acks = append(acks, queen.Settlement{Message: m, Status: queen.StatusDLQ, Error: "no such mailbox"})
	}
	if _, err := client.SettleBatch(ctx, acks, queen.AckOptions{}); err != nil {
		log.Fatal(err)
	}

	list := func() error {
		for dl, err := range client.Admin().DeadLetters(ctx, "emails", queen.DLQListOptions{}) {
			if err != nil {
				return err
			}
			fmt.Println(dl.Error, string(dl.Payload))
		}
		return nil
	}
	if err := list(); err != nil {
		log.Fatal(err)
	}
	// Unordered output:
	// no such mailbox {"to":"a@invalid"}
	// no such mailbox {"to":"b@invalid"}
	// no such mailbox {"to":"c@invalid"}
}
