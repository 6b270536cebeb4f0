package queen_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// A producer for one queue: each push returns at once, and waiting gives
// that message's own result, although it went out in a batch with others.
func ExampleQueueBuilder_Producer() {
	broker := queentest.NewServer()
	defer broker.Close()
	ctx := context.Background()
	client, err := queen.New(broker.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)

	customer, order := "customer-42", map[string]any{"id": 1, "total": 12.5}
	orders, err := client.Queue("orders").Producer(queen.WithBatchDelay(2 * time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer orders.Close(ctx)
	res, err := orders.Partition(customer).Push(ctx, order).Wait(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Status, res.Queue)

	// Many goroutines at once: their messages share push requests.
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if _, err := orders.Partition(customer).Push(ctx, map[string]any{"id": i + 2}).Wait(ctx); err != nil {
				log.Print(err)
			}
		})
	}
	wg.Wait()
	fmt.Println(broker.Requests(queentest.RoutePush) < 51)
	// Output:
	// queued orders
	// true
}

// Fire and forget: the callback hears of every message's outcome, and
// Close sends what is buffered and says how many were not stored.
func ExampleClient_Producer() {
	broker := queentest.NewServer()
	defer broker.Close()
	ctx := context.Background()
	client, err := queen.New(broker.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)

	var mu sync.Mutex
	stored := map[string]int{}
	p, err := client.Producer(queen.WithOnResult(func(r queen.PushResult, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			log.Print(err)
			return
		}
		stored[r.Queue]++
	}))
	if err != nil {
		log.Fatal(err)
	}
	for i := range 10 {
		p.Queue("clicks").Push(ctx, map[string]int{"n": i})
		p.Queue("views").Push(ctx, map[string]int{"n": i})
	}
	if err := p.Close(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(stored["clicks"], stored["views"])
	_, err = p.Queue("clicks").Push(ctx, 1).Wait(ctx)
	fmt.Println(errors.Is(err, queen.ErrClosed))
	// Output:
	// 10 10
	// true
}
