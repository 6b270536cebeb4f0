package queen_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"go.uber.org/goleak"
)

// After Execute returns, no goroutine of the loop is left: slots,
// supervisor, renewers and long polls are all gone (the client's and the
// broker's pooled connections are closed before the check).
func TestConsumeLeavesNoGoroutine(t *testing.T) {
	before := goleak.IgnoreCurrent()
	e := newEnv(t, withFakeClock())
	for p := range 4 {
		e.pushN("q", fmt.Sprint("p", p), 3)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() {
		done <- e.c.Queue("q").Batch(3).Partitions(1).Concurrency(6).RenewLease(true, 5).IdleMillis(60_000).Each().
			Consume(ctx, func(hctx context.Context, m *queen.Message) error {
				started <- struct{}{}
				<-hctx.Done() // ends with the grace period
				return hctx.Err()
			}).GracePeriod(20 * time.Millisecond).Execute(ctx)
	}()
	for range 4 {
		<-started
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := e.srv.LeasedCount("q", ""); n != 0 {
		t.Fatalf("%d messages still leased after Execute returned", n)
	}
	_ = e.c.Close(context.Background())
	e.srv.Close()
	goleak.VerifyNone(t, before)
}
