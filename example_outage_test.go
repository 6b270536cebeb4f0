package queen_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// A producer rides out a broker that refuses connections for a while: the
// message is kept, one batch at a time probes the broker (at most every
// 250 ms), and it is stored as soon as a probe is answered, within its
// delivery timeout.
func ExampleWithDeliveryTimeout() {
	broker := queentest.NewServer()
	defer broker.Close()
	ctx := context.Background()
	client, err := queen.New(broker.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	events, err := client.Queue("events").Producer(queen.WithDeliveryTimeout(30 * time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer events.Close(ctx)

	broker.RefuseConnections(2 * time.Second) // longer than the client's own 4 attempts
	res, err := events.Push(ctx, map[string]string{"page": "/home"}).Wait(ctx)
	switch {
	case errors.Is(err, queen.ErrNotSent):
		fmt.Println("not stored, send it again:", err) // the outage outlasted the timeout
	case err != nil:
		fmt.Println("maybe stored:", err)
	default:
		fmt.Println(res.Status)
	}
	// Output: queued
}

// ErrNotSent says that a call never reached the broker: nothing was
// stored or applied, so doing it again is safe.
func ExampleErrNotSent() {
	ctx := context.Background()
	broker := queentest.NewServer()
	defer broker.Close()
	broker.RefuseConnections(time.Hour)
	client, err := queen.New(broker.URL, queen.WithRetryPolicy(queen.RetryPolicy{MaxAttempts: 2, MinBackoff: time.Millisecond}))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	_, err = client.Queue("orders").Push(map[string]int{"id": 1}).Execute(ctx)
	fmt.Println(errors.Is(err, queen.ErrNotSent), errors.Is(err, queen.ErrOutcomeUnknown))
	// Output: true false
}

// A *ProducerError lists the messages not stored and those that may have
// been, and answers "was it applied?" for them all; each PendingPush says
// its own state.
func ExampleProducerError() {
	broker := queentest.NewServer()
	defer broker.Close()
	ctx := context.Background()
	client, err := queen.New(broker.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	orders, err := client.Queue("orders").Producer(queen.WithBatchDelay(time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	defer orders.Close(ctx)

	orders.Push(ctx, map[string]int{"id": 1})
	orders.Push(ctx, map[string]int{"id": 2})
	broker.FailNext(queentest.RoutePush, 1, 400, 0) // their batch is refused
	err = orders.Flush(ctx)
	if pe, ok := errors.AsType[*queen.ProducerError](err); ok {
		for _, pp := range pe.NotStored {
			_, err := pp.Wait(ctx)
			fmt.Println(pp.State(), errors.Is(err, queen.ErrNotSent), errors.Is(err, queen.ErrOutcomeUnknown))
		}
		fmt.Println(len(pe.Unknown), "unknown")
	}
	next := orders.Push(ctx, map[string]int{"id": 3})
	if err := orders.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(next.State())
	// Output:
	// not stored false false
	// not stored false false
	// 0 unknown
	// stored
}

// Under WithPauseOnFailure a batch that fails for good pauses its
// partition until Resume; by default only the messages buffered behind it
// fail, and the next push goes out.
func ExampleWithPauseOnFailure() {
	broker := queentest.NewServer()
	defer broker.Close()
	ctx := context.Background()
	client, err := queen.New(broker.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	orders, err := client.Queue("orders").Producer(queen.WithPauseOnFailure())
	if err != nil {
		log.Fatal(err)
	}
	defer orders.Close(ctx)

	broker.FailNext(queentest.RoutePush, 1, 400, 0) // refused for good
	_, err = orders.Partition("c-1").Push(ctx, map[string]int{"id": 1}).Wait(ctx)
	fmt.Println(err != nil)
	_, err = orders.Partition("c-1").Push(ctx, map[string]int{"id": 2}).Wait(ctx)
	fmt.Println(errors.Is(err, queen.ErrPartitionPaused), errors.Is(err, queen.ErrNotSent))
	orders.Partition("c-1").Resume()
	res, err := orders.Partition("c-1").Push(ctx, map[string]int{"id": 2}).Wait(ctx)
	fmt.Println(res.Status, err)
	// Output:
	// true
	// true true
	// queued <nil>
}
