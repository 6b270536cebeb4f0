package queen_test

import (
	"context"
	"fmt"
	"log"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// Point the client at every broker of a cluster. With Affinity (the
// default) a consumer group's pops and acks meet on one broker; when that
// broker goes down, they move to another and nothing is lost.
// queentest.Cluster serves one broker state on several nodes, each of
// which a test can stop and resume, to check code against a node loss.
func ExampleWithLoadBalancing() {
	cluster := queentest.NewCluster(3)
	defer cluster.Close()
	ctx := context.Background()
	urls := cluster.URLs()
	client, err := queen.New(urls[0], queen.WithURLs(urls[1:]...), queen.WithLoadBalancing(queen.Affinity))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)

	orders := func() *queen.QueueBuilder {
		return client.Queue("orders").Group("billing").SubscriptionMode(queen.SubscriptionModeAll).Wait(false)
	}
	// servedBy returns the node that served the group's pops.
	servedBy := func() int {
		for i, node := range cluster.Nodes() {
			if node.Requests(queentest.RoutePop) > 0 {
				node.ResetCounters()
				return i
			}
		}
		return -1
	}
	handle := func() int {
		msgs, err := orders().Pop(ctx)
		if err != nil {
			log.Fatal(err)
		}
		for _, m := range msgs {
			if _, err := client.Ack(ctx, m, true, queen.AckOptions{}); err != nil {
				log.Fatal(err)
			}
		}
		return len(msgs)
	}

	if _, err := client.Queue("orders").Push("a", "b").Execute(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("handled", handle())
	owner := servedBy()

	// The group's broker goes down. The next pop goes to another node: the
	// connection the client kept to this one is found closed before the pop
	// is written on it, so the pop surely did not reach it.
	cluster.Node(owner).Stop()
	if _, err := client.Queue("orders").Push("c").Execute(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("handled", handle())
	fmt.Println("moved to another node:", servedBy() != owner)
	if err := cluster.Node(owner).Resume(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// handled 2
	// handled 1
	// moved to another node: true
}
