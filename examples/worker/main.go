// Command worker pushes a few thousand orders over several partitions and
// consumes them with a consumer group: several handlers at once, lease
// renewal, a progress line, a final summary, and a clean stop on Ctrl-C or
// SIGTERM (the orders not handled yet stay in the queue, none is lost).
// It exits 0 by itself once every order has been processed.
//
//	go run ./examples/worker                          # in-process broker (queentest)
//	QUEEN_URL=http://localhost:6632 go run ./examples/worker
//
// With QUEEN_URL unset it starts the in-memory broker of the queentest
// package in the same process, so it runs on a fresh machine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

func main() {
	orders := flag.Int("orders", 3000, "orders to push and process")
	partitions := flag.Int("partitions", 8, "partitions (customers) the orders are spread over")
	concurrency := flag.Int("concurrency", 4, "handlers running at once")
	work := flag.Duration("work", time.Millisecond, "time one order takes to process")
	flag.Parse()
	if err := run(*orders, *partitions, *concurrency, *work); err != nil {
		log.Fatal(err)
	}
}

// errOutOfStock is the transient failure the handler simulates the first
// time it handles some orders. The OnError callback gives such an order back
// with a retry ack (no retry spent): it comes back at once. Any other
// error is acked failed, which spends one of the queue's retries.
var errOutOfStock = errors.New("warehouse briefly out of stock")

// idleStop ends the worker when nothing has come for that long although
// orders are missing (dead-lettered by the broker, say), so that it never
// hangs.
const idleStop = 3000 // ms

func run(total, partitions, concurrency int, work time.Duration) error {
	if total < 1 || partitions < 1 || concurrency < 1 {
		return fmt.Errorf("orders, partitions and concurrency must be positive")
	}
	url := os.Getenv("QUEEN_URL")
	var srv *queentest.Server
	if url == "" {
		srv = queentest.NewServer()
		defer srv.Close()
		url = srv.URL
		fmt.Println("QUEEN_URL not set: using an in-process queentest broker at", url)
	}
	client, err := queen.New(url)
	if err != nil {
		return err
	}
	defer client.Close(context.Background())

	// Ctrl-C or SIGTERM stops the worker cleanly.
	sigCtx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	queue := fmt.Sprintf("worker-orders-%d", time.Now().UnixNano())
	const group = "fulfilment"
	_, err = client.Queue(queue).Config(queen.QueueConfig{
		LeaseTime:       queen.Ptr(30),   // seconds; RenewLease keeps slow orders leased
		RetryLimit:      queen.Ptr(3),    // failed three times: dead-lettered
		RetryDelay:      queen.Ptr(50),   // ms before a failed order comes back
		DeadLetterQueue: queen.Ptr(true), // keep what runs out of retries
	}).Create().Execute(sigCtx)
	if err != nil {
		return fmt.Errorf("create queue: %w", err)
	}

	start := time.Now()
	if err := pushOrders(sigCtx, client, queue, total, partitions); err != nil {
		return err
	}
	fmt.Printf("pushed %d orders over %d partitions of %s in %v\n", total, partitions, queue, time.Since(start).Round(time.Millisecond))

	var (
		mu         sync.Mutex
		done       = make(map[int]bool, total)
		shortOnce  = make(map[int]bool)
		processed  atomic.Int64 // distinct orders done
		duplicates atomic.Int64 // an order handled again after it was done (should stay 0)
		retried    atomic.Int64
		inFlight   atomic.Int64
	)
	ctx, finish := context.WithCancel(sigCtx) // finish: every order is done
	defer finish()

	stopProgress := progress(&processed, &inFlight, total)
	consumeStart := time.Now()
	err = client.Queue(queue).
		Group(group).
		SubscriptionMode(queen.SubscriptionModeAll).
		Batch(50).
		Concurrency(concurrency). // handlers at once, each on its own partitions
		RenewLease(true, 1000).   // renew every second while a handler runs
		IdleMillis(idleStop).     // a safety net: see idleStop
		Each().
		Consume(ctx, func(ctx context.Context, msg *queen.Message) error {
			inFlight.Add(1)
			defer inFlight.Add(-1)
			id := int(msg.Data["id"].(float64))
			if id%100 == 7 {
				mu.Lock()
				first := !shortOnce[id]
				shortOnce[id] = true
				mu.Unlock()
				if first { // out of stock the first time it is handled
					retried.Add(1)
					return fmt.Errorf("order %d: %w", id, errOutOfStock)
				}
			}
			select { // the work; a stop past the grace period cancels ctx
			case <-time.After(work):
			case <-ctx.Done():
				return ctx.Err()
			}
			mu.Lock()
			if done[id] {
				duplicates.Add(1)
			}
			done[id] = true
			mu.Unlock()
			if processed.Add(1) == int64(total) {
				finish()
			}
			return nil
		}).
		OnError(func(ctx context.Context, msg *queen.Message, err error) queen.Outcome {
			if errors.Is(err, errOutOfStock) {
				return queen.Retry() // back at once, no retry spent
			}
			return queen.Fail(err)
		}).
		GracePeriod(5 * time.Second). // a stop lets running orders finish
		Execute(ctx)
	stopProgress()
	elapsed := time.Since(consumeStart)
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}

	n := processed.Load()
	fmt.Printf("processed %d/%d orders in %v (%.0f orders/s), %d given back once and retried, %d duplicates\n",
		n, total, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), retried.Load(), duplicates.Load())
	if srv != nil {
		fmt.Printf("broker: %d leased, %d dead-lettered\n", srv.LeasedCount(queue, group), srv.DLQCount(queue))
	}
	if n < int64(total) {
		if sigCtx.Err() != nil {
			fmt.Printf("stopped by signal: the %d orders not processed stay in %s for the next worker\n", int64(total)-n, queue)
			return nil
		}
		return fmt.Errorf("%d orders missing after %d ms with nothing to do (dead-lettered?); they stay in %s",
			int64(total)-n, idleStop, queue)
	}
	if _, err := client.Queue(queue).Delete().Execute(context.Background()); err != nil {
		return fmt.Errorf("delete queue: %w", err)
	}
	fmt.Println("all orders processed")
	return nil
}

// pushOrders pushes the orders in chunks, each partition ("customer-K")
// getting every partitions-th order. Every order carries its own
// transaction id, so a retried push never stores it twice.
func pushOrders(ctx context.Context, client *queen.Client, queue string, total, partitions int) error {
	const chunk = 500
	for p := range partitions {
		var items []any
		flush := func() error {
			if len(items) == 0 {
				return nil
			}
			_, err := client.Queue(queue).Partition(fmt.Sprintf("customer-%d", p)).Push(items...).Execute(ctx)
			items = items[:0]
			return err
		}
		for id := p; id < total; id += partitions {
			items = append(items, queen.Item{
				Payload:       map[string]any{"id": id, "customer": p, "total": 10 + id%90},
				TransactionID: fmt.Sprintf("order-%d", id),
			})
			if len(items) == chunk {
				if err := flush(); err != nil {
					return fmt.Errorf("push: %w", err)
				}
			}
		}
		if err := flush(); err != nil {
			return fmt.Errorf("push: %w", err)
		}
	}
	return nil
}

// progress prints a progress line every 250 ms until the returned func is
// called.
func progress(processed, inFlight *atomic.Int64, total int) (stop func()) {
	quit, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		start, last, lastAt := time.Now(), int64(0), time.Now()
		for {
			select {
			case <-quit:
				return
			case now := <-t.C:
				n := processed.Load()
				rate := float64(n-last) / now.Sub(lastAt).Seconds()
				last, lastAt = n, now
				fmt.Printf("[%5.1fs] processed %d/%d (%3.0f%%)  rate %6.0f/s  in flight %d\n",
					now.Sub(start).Seconds(), n, total, 100*float64(n)/float64(total), rate, inFlight.Load())
			}
		}
	}()
	return func() {
		close(quit)
		<-exited
	}
}
