package queen

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"testing/synctest"
	"time"
)

// A stop while a handler runs: it finishes (within the grace period) and
// is acked; the messages of its pop that never started go back as retry in
// the same ack; Execute returns nil.
func TestStopGivesBackUnstarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.add("p", 3)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		e, _ := testEngine(t, ctx, f, engineConfig{each: true, grace: time.Minute}, 0,
			func(hctx context.Context, m *Message) error {
				cancel()
				time.Sleep(20 * time.Millisecond) // still within the grace period
				return hctx.Err()
			})
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		want := []string{"p/0:completed", "p/1:retry", "p/2:retry"}
		if got := statuses(f.settles()); !reflect.DeepEqual(got, want) {
			t.Fatalf("settled %v, want %v", got, want)
		}
	})
}

// After the grace period the handlers' ctx is cancelled (its cause says
// so) and a handler that gives up because of it is given back, not failed.
func TestStopGraceCancelsHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.add("p", 1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var cause error
		e, _ := testEngine(t, ctx, f, engineConfig{each: true, grace: 20 * time.Millisecond}, 0,
			func(hctx context.Context, m *Message) error {
				cancel()
				<-hctx.Done()
				cause = context.Cause(hctx)
				return errors.New("gave up: " + hctx.Err().Error())
			})
		start := time.Now()
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		// The bubble's clock moves only when every goroutine waits: the
		// run takes the grace period exactly, whatever the machine's load.
		if d := time.Since(start); d != 20*time.Millisecond || !errors.Is(cause, errConsumeStopped) {
			t.Fatalf("handler ctx ended after %v with %v, want the 20 ms grace period", d, cause)
		}
		if got := statuses(f.settles()); !reflect.DeepEqual(got, []string{"p/0:retry"}) {
			t.Fatalf("settled %v, want p/0 given back", got)
		}
	})
}

// A pop whose answer is on its way at the stop gets answerOnItsWay to arrive;
// its messages are then given back whole, never handled.
func TestStopDrainsAnswerOnItsWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.add("p", 2)
		f.popGate = make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		e, _ := testEngine(t, ctx, f, engineConfig{each: true}, 0,
			func(context.Context, *Message) error { t.Error("a message was handled after the stop"); return nil })
		go func() {
			for {
				f.mu.Lock()
				n := f.inflight
				f.mu.Unlock()
				if n > 0 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			cancel()
			time.Sleep(answerOnItsWay / 5)
			close(f.popGate) // the answer arrives within the drain
		}()
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		if got := statuses(f.settles()); !reflect.DeepEqual(got, []string{"p/0:retry", "p/1:retry"}) {
			t.Fatalf("settled %v, want both given back", got)
		}
	})
}

// A long poll still parked after the drain is abandoned: the stop takes
// answerOnItsWay, not the poll's wait.
func TestStopAbandonsParkedPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.popWait = time.Minute
		ctx, cancel := context.WithCancel(context.Background())
		e, _ := testEngine(t, ctx, f, engineConfig{slots: 3, each: true}, 0,
			func(context.Context, *Message) error { return nil })
		time.AfterFunc(20*time.Millisecond, cancel)
		start := time.Now()
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		// On the bubble's clock: the stop at 20 ms, then answerOnItsWay.
		if d := time.Since(start); d != 20*time.Millisecond+answerOnItsWay {
			t.Fatalf("stop took %v, want 20 ms and answerOnItsWay (%v)", d, answerOnItsWay)
		}
		if f.maxWait != 1 {
			t.Fatalf("%d long polls at once, want one (the first pops did not wait)", f.maxWait)
		}
	})
}

// A ctx that ended before Execute: no pop at all.
func TestStopBeforeStart(t *testing.T) {
	f := newFakeBroker(10)
	f.add("p", 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e, _ := testEngine(t, ctx, f, engineConfig{slots: 4, each: true}, 0,
		func(context.Context, *Message) error { return nil })
	if err := runEngine(t, e); err != nil || len(f.pops) != 0 {
		t.Fatalf("run = %v after %d pops, want nil and none", err, len(f.pops))
	}
}

// IdleMillis: the loop stops after that long with no pop in hand.
func TestStopIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.add("p", 1)
		e, _ := testEngine(t, context.Background(), f, engineConfig{each: true, idle: 50 * time.Millisecond}, 0,
			func(context.Context, *Message) error { return nil })
		start := time.Now()
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		// On the bubble's clock: the idle time exactly.
		if d := time.Since(start); d != 50*time.Millisecond || len(f.left()) != 0 {
			t.Fatalf("idle stop after %v, left %v", d, f.left())
		}
	})
}

// IdleMillis counts from what the loop learnt: a first pop slower than
// the idle time (a slow broker, a loaded machine) is waited for, and its
// messages handled; the idle stop comes one idle time after them.
func TestStopIdleNotBeforeTheFirstAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.add("p", 2)
		gate := make(chan struct{})
		f.popGate = gate
		go func() {
			time.Sleep(5 * time.Second) // five idle times
			close(gate)
		}()
		defer func() { <-gate }() // the bubble ends with no goroutine left
		var handled int
		e, _ := testEngine(t, context.Background(), f, engineConfig{each: true, idle: time.Second}, 0,
			func(context.Context, *Message) error { handled++; return nil })
		start := time.Now()
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		if handled != 2 || len(f.left()) != 0 {
			t.Fatalf("handled %d, left %v: the loop stopped idle before its first pop was answered", handled, f.left())
		}
		if d := time.Since(start); d < 6*time.Second {
			t.Fatalf("idle stop %v after the start, want one idle time after the first answer (5 s)", d)
		}
	})
}

// IdleMillis does not run while a handler does: a handler three idle
// times long, then the partition's next message, then the idle stop, one
// idle time after the last handler returned.
func TestStopIdleNotWhileBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(1)
		f.add("p", 2)
		start := time.Now()
		var handled []string
		var lastDone time.Duration
		e, _ := testEngine(t, context.Background(), f, engineConfig{slots: 3, each: true, idle: 100 * time.Millisecond}, 0,
			func(_ context.Context, m *Message) error {
				if len(handled) == 0 {
					time.Sleep(300 * time.Millisecond) // longer than the idle time
				}
				handled = append(handled, m.Partition)
				lastDone = time.Since(start)
				return nil
			})
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		if len(handled) != 2 || len(f.left()) != 0 {
			t.Fatalf("handled %v, left %v: the loop went idle while a handler ran", handled, f.left())
		}
		// On the bubble's clock: the idle time after the last handler's
		// settle (which the settler may hold a few ms), not a second one.
		if d := time.Since(start) - lastDone; d < 100*time.Millisecond || d >= 200*time.Millisecond {
			t.Fatalf("stopped %v after the last handler, want the idle time (100 ms)", d)
		}
	})
}

// A stop does not wait for a renewal in flight: once the last ack is
// answered Execute returns, the renewal cancelled (a broker that holds
// it would else keep Execute for the renewal's own timeout).
func TestStopDoesNotWaitForRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.add("p", 1)
		f.renewGate = make(chan struct{}) // never opened: renewals hang
		e, _ := testEngine(t, context.Background(), f, engineConfig{each: true, renewEvery: 2 * time.Millisecond, renewSecs: 1}, 1,
			func(context.Context, *Message) error {
				time.Sleep(5 * time.Millisecond) // a renewal goes meanwhile, and hangs
				return nil
			})
		start := time.Now()
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("Execute took %v: it waited for the renewal in flight", took)
		}
		if got := statuses(f.settles()); len(got) != 1 || got[0] != "p/0:completed" {
			t.Fatalf("settled %v", got)
		}
	})
}

// The bound on a stop's last acks is hard: 15 s after the stop (with no
// grace period) the acks in flight are cancelled and Execute returns,
// whenever they went.
func TestStopAcksBoundIsHard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.add("p", 1)
		f.setGate = make(chan struct{}) // never opened: acks hang
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		e, _ := testEngine(t, ctx, f, engineConfig{each: true}, 1,
			func(context.Context, *Message) error {
				time.Sleep(14 * time.Second) // past the stop: its ack goes 13 s after it
				return nil
			})
		time.AfterFunc(time.Second, cancel)
		start := time.Now()
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != time.Second+settleTimeout {
			t.Fatalf("Execute returned %v after the start, want the stop (1 s) and %v", took, settleTimeout)
		}
	})
}

// A stop gives back a retry that is due (its delay over, waiting for a
// handler) as one still in its delay: retry with the failure's error,
// nothing charged.
func TestStopGivesBackDueRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.rule = &retryRule{known: true, limit: 3, delay: time.Second}
		f.add("a", 1)
		f.add("b", 1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		e, _ := testEngine(t, ctx, f, engineConfig{each: true}, 3,
			func(_ context.Context, m *Message) error {
				if m.PartitionID == "a" {
					return errors.New("boom")
				}
				time.Sleep(2 * time.Second) // the one handler is busy when a's retry is due
				return nil
			})
		time.AfterFunc(1500*time.Millisecond, cancel)
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		var got []Settlement
		for _, s := range f.settles() {
			for _, a := range s {
				if a.Message.PartitionID == "a" {
					got = append(got, a)
				}
			}
		}
		if len(got) != 1 || got[0].Status != StatusRetry || got[0].Error != "boom" {
			t.Fatalf("a's acks %+v, want one retry with the failure's error", got)
		}
	})
}

// Renewals left in flight by pops that settled are not waited for at the
// stop, and more of them than the sender's answer buffer holds must not
// keep Execute: each pop's renewal hangs, the pops settle one after
// another, and the Limit stops the loop with them all in flight.
func TestStopManyRenewalsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(1)
		f.add("p", 12)
		f.renewGate = make(chan struct{}) // never opened: renewals hang
		e, _ := testEngine(t, context.Background(), f, engineConfig{each: true, renewEvery: 2 * time.Millisecond, renewSecs: 1}, 12,
			func(context.Context, *Message) error {
				time.Sleep(5 * time.Millisecond) // a renewal goes meanwhile, and hangs
				return nil
			})
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		if got := statuses(f.settles()); len(got) != 12 {
			t.Fatalf("settled %v", got)
		}
	})
}
