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

// Replay a whole dead-letter queue once the cause is fixed: every letter's
// message goes back to the tail of its partition, oldest first, and the
// letters go. The copies reach every group of the queue, not only the one
// that dead-lettered them: here the audit group, which had read the
// originals, reads them again.
func ExampleAdmin_ReplayDeadLetters() {
	srv := queentest.NewServer()
	defer srv.Close()
	ctx := context.Background()
	client, err := queen.New(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	_, err = client.Queue("webhooks").Partition("customer-9").
		Push(map[string]int{"event": 1}, map[string]int{"event": 2}, map[string]int{"event": 3}).Execute(ctx)
	if err != nil {
		log.Fatal(err)
	}
	settleAll := func(group string, status queen.AckStatus) []*queen.Message {
		msgs, err := client.Queue("webhooks").Group(group).SubscriptionMode(queen.SubscriptionModeAll).Batch(10).Wait(false).Pop(ctx)
		if err != nil {
			log.Fatal(err)
		}
		var acks []queen.Settlement
		for _, m := range msgs {
			acks = append(acks, queen.Settlement{Message: m, Status: status, Error: "endpoint down"})
		}
		if len(acks) > 0 {
			if _, err := client.SettleBatch(ctx, acks, queen.AckOptions{ConsumerGroup: group}); err != nil {
				log.Fatal(err)
			}
		}
		return msgs
	}
	settleAll("audit", queen.StatusCompleted)
	settleAll("sender", queen.StatusDLQ) // the endpoint was down

	report, err := client.Admin().ReplayDeadLetters(ctx, "webhooks", queen.DLQListOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("moved:", report.Moved, "letters removed:", report.Removed)
	for _, group := range []string{"sender", "audit"} {
		for _, m := range settleAll(group, queen.StatusCompleted) {
			fmt.Println(group, string(m.Raw))
		}
	}
	// Output:
	// moved: 3 letters removed: 3
	// sender {"event":1}
	// sender {"event":2}
	// sender {"event":3}
	// audit {"event":1}
	// audit {"event":2}
	// audit {"event":3}
}
