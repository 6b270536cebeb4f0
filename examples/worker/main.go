// Command worker pushes a few thousand orders over several partitions and
// consumes them with a consumer group: several handlers at once, lease
// renewal, a progress line, a final summary, and a clean stop on Ctrl-C or
// SIGTERM (the orders not handled yet stay in the queue, none is lost; a
// second Ctrl-C ends the process at once). It exits 0 by itself once every
// order has been processed.
//
//	go run ./examples/worker                          # in-process broker (queentest)
//	go run ./examples/worker -orders 100000 -work 2ms # long enough to press Ctrl-C
//	QUEEN_URL=http://localhost:6632 go run ./examples/worker
//	QUEEN_URL=http://h1:6632,http://h2:6632 go run ./examples/worker # a cluster
//
// With QUEEN_URL unset it starts the in-memory broker of the queentest
// package in the same process, so it runs on a fresh machine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

func main() {
	var cfg config
	flag.IntVar(&cfg.orders, "orders", 3000, "orders to push and process")
	flag.IntVar(&cfg.partitions, "partitions", 8, "partitions (customers) the orders are spread over")
	flag.IntVar(&cfg.concurrency, "concurrency", 4, "handlers running at once")
	flag.DurationVar(&cfg.work, "work", time.Millisecond, "time one order takes to process")
	flag.Parse()

	// Ctrl-C or SIGTERM stops the worker cleanly. After the first one the
	// signals are no longer caught: a second Ctrl-C ends the process at once.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()

	if _, err := run(ctx, cfg, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// config is what the flags set.
type config struct {
	orders, partitions, concurrency int
	work                            time.Duration
}

// summary is what a run did.
type summary struct {
	processed  int64 // distinct orders done
	duplicates int64 // an order handled again after it was done (should stay 0)
	retried    int64 // orders given back once (out of stock) and handled again
	left       int64 // orders still in the queue for the group when it stopped
	leased     int   // orders still leased when it stopped (in-process broker only; should be 0)
	stopped    bool  // stopped by ctx (a signal) before every order was done
}

// errOutOfStock is the transient failure the handler simulates the first
// time it handles some orders. The OnError callback gives such an order back
// with a retry ack (no retry spent): it comes back at once. Any other
// error is a failure: the loop retries the order where it failed, after
// the queue's RetryDelay, and dead-letters it once its retries are spent.
var errOutOfStock = errors.New("warehouse briefly out of stock")

// idleStop ends the worker when nothing has come for that long although
// orders are missing (dead-lettered by the broker, say), so that it never
// hangs.
const idleStop = 3000 // ms

const group = "fulfilment"

// run pushes the orders and consumes them until every one is done or ctx
// ends (the signal), then prints a summary to out.
func run(ctx context.Context, cfg config, out io.Writer) (summary, error) {
	var sum summary
	if cfg.orders < 1 || cfg.partitions < 1 || cfg.concurrency < 1 {
		return sum, fmt.Errorf("orders, partitions and concurrency must be positive")
	}
	url, opts := brokers(os.Getenv("QUEEN_URL"))
	var srv *queentest.Server
	if url == "" {
		srv = queentest.NewServer()
		defer srv.Close()
		url = srv.URL
		fmt.Fprintln(out, "QUEEN_URL not set: using an in-process queentest broker at", url)
	}
	client, err := queen.New(url, opts...)
	if err != nil {
		return sum, err
	}
	defer client.Close(context.Background())

	queue := fmt.Sprintf("worker-orders-%d", time.Now().UnixNano())
	_, err = client.Queue(queue).Config(queen.QueueConfig{
		LeaseTime:       queen.Ptr(30 * time.Second),      // RenewLease keeps slow orders leased
		RetryLimit:      queen.Ptr(3),                     // a fourth failure of an order dead-letters it
		RetryDelay:      queen.Ptr(50 * time.Millisecond), // before a failed order is retried
		DeadLetterQueue: queen.Ptr(true),                  // keep what runs out of retries
	}).Create().Execute(ctx)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(out, "stopped by signal before anything was pushed")
			sum.stopped = true
			return sum, nil
		}
		return sum, fmt.Errorf("create queue: %w", err)
	}

	start := time.Now()
	err = pushOrders(ctx, client, queue, cfg.orders, cfg.partitions)
	if err != nil && ctx.Err() == nil {
		return sum, err
	}
	if ctx.Err() != nil {
		// Stopped while pushing: what was pushed stays for the next worker.
		fmt.Fprintln(out, "stopped by signal while pushing; the orders pushed stay in", queue)
		sum.stopped = true
		return sum, nil
	}
	fmt.Fprintf(out, "pushed %d orders over %d partitions of %s in %v\n",
		cfg.orders, cfg.partitions, queue, time.Since(start).Round(time.Millisecond))

	var (
		mu         sync.Mutex
		done       = make(map[int]bool, cfg.orders)
		shortOnce  = make(map[int]bool)
		processed  atomic.Int64 // distinct orders done
		duplicates atomic.Int64
		retried    atomic.Int64
		inFlight   atomic.Int64
	)
	cctx, finish := context.WithCancel(ctx) // finish: every order is done
	defer finish()

	stopProgress := progress(out, &processed, &inFlight, cfg.orders)
	consumeStart := time.Now()
	err = client.Queue(queue).
		Group(group).
		SubscriptionMode(queen.SubscriptionModeAll).
		Batch(50).
		Concurrency(cfg.concurrency). // handlers at once, each on its own partitions
		RenewLease(true, 1000).       // renew every second while a handler runs
		IdleMillis(idleStop).         // a safety net: see idleStop
		Each().
		Consume(cctx, func(ctx context.Context, msg *queen.Message) error {
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
			case <-time.After(cfg.work):
			case <-ctx.Done():
				return ctx.Err()
			}
			mu.Lock()
			again := done[id]
			done[id] = true
			mu.Unlock()
			if again {
				duplicates.Add(1)
				return nil
			}
			if processed.Add(1) == int64(cfg.orders) {
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
		Execute(cctx)
	stopProgress()
	elapsed := time.Since(consumeStart)
	if err != nil {
		return sum, fmt.Errorf("consume: %w", err)
	}

	sum.processed, sum.duplicates, sum.retried = processed.Load(), duplicates.Load(), retried.Load()
	fmt.Fprintf(out, "processed %d/%d orders in %v (%.0f orders/s), %d given back once and retried, %d duplicates\n",
		sum.processed, cfg.orders, elapsed.Round(time.Millisecond), float64(sum.processed)/elapsed.Seconds(),
		sum.retried, sum.duplicates)
	if srv != nil {
		sum.leased = srv.LeasedCount(queue, group)
		fmt.Fprintf(out, "broker: %d leased, %d dead-lettered\n", sum.leased, srv.DLQCount(queue))
	}
	if sum.processed == int64(cfg.orders) {
		// Every order handled: wait until the broker has every ack too
		// (a lag of 0) before the queue goes.
		wait, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := client.Admin().AwaitDrained(wait, queue, group, queen.DrainOptions{Interval: 100 * time.Millisecond}); err != nil {
			return sum, fmt.Errorf("wait for the group to drain the queue: %w", err)
		}
		if _, err := client.Queue(queue).Delete().Execute(context.Background()); err != nil {
			return sum, fmt.Errorf("delete queue: %w", err)
		}
		fmt.Fprintln(out, "all orders processed")
		return sum, nil
	}

	// Not every order is done: say what is left for the next worker, and
	// check that nothing went missing on the way.
	sum.left, err = leftInQueue(client, queue)
	if err != nil {
		return sum, fmt.Errorf("read what is left: %w", err)
	}
	if ctx.Err() != nil {
		sum.stopped = true
		if sum.processed+sum.left != int64(cfg.orders) || sum.leased != 0 {
			return sum, fmt.Errorf("stopped by signal, orders lost: %d processed + %d left of %d (%d leased)",
				sum.processed, sum.left, cfg.orders, sum.leased)
		}
		fmt.Fprintf(out, "stopped by signal: %d processed, %d left in %s for the next worker, none lost\n",
			sum.processed, sum.left, queue)
		return sum, nil
	}
	return sum, fmt.Errorf("%d orders missing after %d ms with nothing to do (dead-lettered?); %d left in %s",
		int64(cfg.orders)-sum.processed, idleStop, sum.left, queue)
}

// leftInQueue counts the orders the group has not settled yet: its lag on
// every partition of the queue, those it never read included.
func leftInQueue(client *queen.Client, queue string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lag, err := client.Admin().Lag(ctx, queue, group)
	return lag.Pending, err
}

// pushOrders pushes the orders in chunks, each partition ("customer-K")
// getting every partitions-th order. Every order carries its own
// transaction id, so a retried push never stores it twice.
func pushOrders(ctx context.Context, client *queen.Client, queue string, total, partitions int) error {
	const chunk = 500
	for p := range partitions {
		name := fmt.Sprintf("customer-%d", p)
		var items []any
		flush := func() error {
			if len(items) == 0 {
				return nil
			}
			_, err := client.Queue(queue).Partition(name).Push(items...).Execute(ctx)
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
func progress(out io.Writer, processed, inFlight *atomic.Int64, total int) (stop func()) {
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
				fmt.Fprintf(out, "[%5.1fs] processed %d/%d (%3.0f%%)  rate %6.0f/s  in flight %d\n",
					now.Sub(start).Seconds(), n, total, 100*float64(n)/float64(total), rate, inFlight.Load())
			}
		}
	}()
	return func() {
		close(quit)
		<-exited
	}
}

// brokers splits QUEEN_URL, one URL or a comma list of the brokers of a
// cluster, into the first URL and the options naming the others.
func brokers(list string) (string, []queen.Option) {
	var urls []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		return "", nil
	}
	return urls[0], []queen.Option{queen.WithURLs(urls[1:]...)}
}
