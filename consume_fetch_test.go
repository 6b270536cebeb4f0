package queen

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// The Limit: each pop asks for at most a batch, a remainder smaller than
// a batch is asked for by one pop, and what a pop did not get goes back.
func TestLimiterReserve(t *testing.T) {
	l := limiter{on: true, left: 250}
	var got []int
	for {
		n, ok := l.reserve(100)
		if !ok {
			break
		}
		got = append(got, n)
	}
	if !reflect.DeepEqual(got, []int{100, 100, 50}) || l.held != 250 || l.left != 0 {
		t.Fatalf("reserved %v (held %d, left %d), want 100 100 50", got, l.held, l.left)
	}
	l.popped(50, 20) // the last pop got 20 of its 50
	if n, ok := l.reserve(100); !ok || n != 30 {
		t.Fatalf("after a short pop: reserve = %d %v, want the 30 it did not get", n, ok)
	}
	l.settled(100, 100)
	l.settled(100, 90) // 10 given back: they count again
	if l.left != 10 || l.reached() {
		t.Fatalf("left %d reached %v, want 10 and not reached", l.left, l.reached())
	}
	if n, ok := (&limiter{}).reserve(100); !ok || n != 0 {
		t.Fatalf("no Limit: reserve = %d %v, want 0 (the builder's batch) true", n, ok)
	}
}

// The end game of a Limit with several handlers: the remainder goes out as
// one pop, and another only for what it did not get, never split into
// small pops at once (issue 11: they contend for the last partitions).
func TestFetchLimitRemainderIsOnePop(t *testing.T) {
	f := newFakeBroker(100)
	f.maxPart = 1 // a pop takes one partition: 3 messages
	for p := range 5 {
		f.add(fmt.Sprint("p", p), 3)
	}
	var handled atomic.Int32
	e, _ := testEngine(t, context.Background(), f, engineConfig{slots: 4, each: true}, 10,
		func(context.Context, *Message) error { handled.Add(1); return nil })
	if err := runEngine(t, e); err != nil {
		t.Fatal(err)
	}
	if handled.Load() != 10 {
		t.Fatalf("handled %d, want the Limit of 10", handled.Load())
	}
	if !reflect.DeepEqual(f.pops, []int{10, 7, 4, 1}) || f.maxFlight != 1 {
		t.Fatalf("pops asked for %v (at most %d at once), want 10 7 4 1, one at a time", f.pops, f.maxFlight)
	}
	if left := f.left(); len(left) != 5 {
		t.Fatalf("left %v, want the 5 beyond the Limit", left)
	}
}

// Pops that fail are retried with a growing backoff, loudly but once: a
// Warn at the first failure, the failures after it at Debug, a Warn (the
// level of the outage's start, so that a logger that shows the outage
// shows its end) when a pop succeeds again; the hook gets every failure,
// typed; nothing is lost.
func TestFetchFailuresLoudAndBounded(t *testing.T) {
	f := newFakeBroker(10)
	f.add("p", 3)
	unavailable := &BrokerError{Status: 503, Method: "GET", Path: "/api/v1/pop/queue/q", Message: "no leader"}
	refused := fmt.Errorf("queen: transport: %w", syscall.ECONNREFUSED)
	f.popErrs = []error{unavailable, unavailable, unavailable, unavailable, unavailable, unavailable, refused}
	var hooked []error
	e, logs := testEngine(t, context.Background(), f, engineConfig{each: true}, 3,
		func(context.Context, *Message) error { return nil })
	e.on.onLoopError = func(_ context.Context, err error) { hooked = append(hooked, err) }
	if err := runEngine(t, e); err != nil {
		t.Fatal(err)
	}
	if len(hooked) != 7 {
		t.Fatalf("hook got %d errors, want the 7 failures", len(hooked))
	}
	var le *LoopError
	var be *BrokerError
	if !errors.As(hooked[0], &le) || le.Op != LoopOpPop || !errors.As(hooked[0], &be) || be.Status != 503 {
		t.Fatalf("hook got %v, want a pop LoopError carrying the 503", hooked[0])
	}
	if !errors.Is(hooked[6], syscall.ECONNREFUSED) {
		t.Fatalf("hook got %v, want the network error", hooked[6])
	}
	out := logs.String()
	if n := strings.Count(out, "level=WARN msg=\"queen: pop failed"); n != 1 {
		t.Fatalf("%d Warn lines for 7 failed pops, want 1 (the outage's start):\n%s", n, out)
	}
	if n := strings.Count(out, "level=DEBUG msg=\"queen: pop failed"); n != 6 {
		t.Fatalf("%d Debug lines for 7 failed pops, want 6 (the failures after the first):\n%s", n, out)
	}
	if !strings.Contains(out, "level=WARN msg=\"queen: pop failed") || !strings.Contains(out, "no leader") {
		t.Fatalf("the first failure is not a Warn with the error:\n%s", out)
	}
	if !strings.Contains(out, "level=WARN msg=\"queen: pops succeed again\"") || !strings.Contains(out, "failures=7") {
		t.Fatalf("no Warn line on recovery:\n%s", out)
	}
	if left := f.left(); len(left) != 0 {
		t.Fatalf("left %v", left)
	}
}

// A refusal that asking again cannot change ends the loop with it.
func TestFetchRefusalEndsLoop(t *testing.T) {
	for _, status := range []int{400, 401, 403, 404, 501} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			f := newFakeBroker(10)
			refusal := &BrokerError{Status: status, Message: "no"}
			f.popErrs = []error{refusal}
			var hooked atomic.Int32
			e, logs := testEngine(t, context.Background(), f, engineConfig{slots: 2, each: true}, 0,
				func(context.Context, *Message) error { return nil })
			e.on.onLoopError = func(context.Context, error) { hooked.Add(1) }
			if err := runEngine(t, e); !errors.Is(err, refusal) {
				t.Fatalf("run = %v, want the refusal", err)
			}
			if hooked.Load() < 1 || !strings.Contains(logs.String(), "level=ERROR") {
				t.Fatalf("refusal not reported (hook %d):\n%s", hooked.Load(), logs.String())
			}
		})
	}
	for _, status := range []int{408, 429, 500, 502, 503, 504} {
		if fatalPopError(&BrokerError{Status: status}) {
			t.Errorf("%d ends the loop; it is worth asking again", status)
		}
	}
}

// A hook that panics is logged and does not stop the loop.
func TestLoopErrorHookPanics(t *testing.T) {
	f := newFakeBroker(10)
	f.add("p", 1)
	f.popErrs = []error{errors.New("blip")}
	e, logs := testEngine(t, context.Background(), f, engineConfig{each: true}, 1,
		func(context.Context, *Message) error { return nil })
	e.on.onLoopError = func(context.Context, error) { panic("hook bug") }
	if err := runEngine(t, e); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "OnLoopError hook panicked") || len(f.left()) != 0 {
		t.Fatalf("left %v, logs:\n%s", f.left(), logs.String())
	}
}

// How a pop goes (paced): it waits at the broker only when the loop holds
// nothing else, since a partition the loop leased itself is free again at
// its next ack and a broker re-checks a waiting pop only now and then
// (0.15.1: after 100 ms, then up to 1 s); once such a pop found nothing
// (contended), one pop per settle, and a long poll only after a pause with
// no settle.
func TestFetchPaced(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name                      string
		queued, running, settling int
		inflight                  int
		flowing, contended        bool
		tokens                    int
		fallback                  time.Duration // fallbackAt - now
		slots                     int
		first                     bool // no pop answered yet
		goes, nowait              bool
		tokensAfter               int
	}{
		{name: "nothing held: a long poll", goes: true},
		{name: "the first pops of several handlers", slots: 2, first: true, goes: true, nowait: true},
		{name: "a pop in hand", running: 1, goes: true, nowait: true},
		{name: "a group waiting", queued: 1, goes: true, nowait: true},
		{name: "a pop being settled", settling: 1, goes: true, nowait: true},
		{name: "a pop in flight while messages flow", inflight: 1, flowing: true, goes: true, nowait: true},
		{name: "pops in flight on a queue found empty", inflight: 3, goes: true},
		{name: "contended, a settle to use", running: 1, contended: true, tokens: 2, fallback: time.Minute, goes: true, nowait: true, tokensAfter: 1},
		{name: "contended, no settle: wait", running: 1, contended: true, fallback: time.Minute},
		{name: "contended, no settle for a pause: a long poll", running: 1, contended: true, fallback: -time.Millisecond, goes: true},
		{name: "contended but nothing held: a long poll", contended: true, fallback: time.Minute, goes: true},
	} {
		f := &fetcher{inflight: tc.inflight, flowing: tc.flowing, contended: tc.contended, tokens: tc.tokens,
			fallbackAt: now.Add(tc.fallback), answered: !tc.first}
		goes, nowait := f.paced(now, tc.queued+tc.running+tc.settling, tc.slots)
		if goes != tc.goes || nowait != tc.nowait || f.tokens != tc.tokensAfter {
			t.Errorf("%s: paced = goes %v nowait %v (tokens left %d), want %v %v (%d)", tc.name, goes, nowait, f.tokens, tc.goes, tc.nowait, tc.tokensAfter)
		}
	}
}

// While contended, each partition the loop frees (the answer to its last
// ack) lets one more pop go, and puts off the long poll of the handlers
// left waiting.
func TestFetchFreedLetsOnePopGo(t *testing.T) {
	for _, contended := range []bool{true, false} {
		f := newFetcher(0)
		f.contended = contended
		f.freed(4)
		tokens, later := f.tokens, f.fallbackAt.After(time.Now())
		if want := btoi(contended); tokens != want || later != contended {
			t.Errorf("contended %v: after a freed partition, %d pops may go (want %d), long poll put off %v", contended, tokens, want, later)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// More handlers than partitions (issue 11 review: 8 handlers, one
// partition): no pop per idle handler at every ack; pops that find nothing
// stay about one per message, and the run ends at once.
func TestFetchContendedPopsArePaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(1)
		f.popWait = 200 * time.Millisecond // a long poll's wait: it must not be needed
		f.add("p", 60)
		e, _ := testEngine(t, context.Background(), f, engineConfig{slots: 8, each: true}, 60,
			func(context.Context, *Message) error { time.Sleep(200 * time.Microsecond); return nil })
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		if left := f.left(); len(left) != 0 {
			t.Fatalf("left %v", left)
		}
		f.mu.Lock()
		pops := len(f.pops)
		f.mu.Unlock()
		if pops > 3*60 {
			t.Fatalf("%d pops for 60 messages: the idle handlers popped at every ack", pops)
		}
		t.Logf("%d pops for 60 messages", pops)
	})
}

// One handler long-polls at every pop.
func TestFetchOneHandlerAlwaysWaits(t *testing.T) {
	f := newFakeBroker(2)
	f.add("p", 6)
	e, _ := testEngine(t, context.Background(), f, engineConfig{each: true}, 6,
		func(context.Context, *Message) error { return nil })
	if err := runEngine(t, e); err != nil {
		t.Fatal(err)
	}
	if w := f.nowaitsNow(); slices.Contains(w, true) {
		t.Fatalf("pops that did not wait: %v", w)
	}
}

// The end game of issue 11: the only partition left is leased by the loop
// itself. A pop that does not wait finds nothing, and its pause (a minute,
// by the broker's advice) ends at the loop's next settle: the next pop
// takes the partition that settle freed, and the run ends in milliseconds.
func TestFetchSettleFreesTheLastPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(1)
		minute := 60000
		f.quickMs = &minute
		f.popWait = 20 * time.Millisecond
		f.add("p", 3)
		quickEmpty := func() bool { // a pop that did not wait came back empty
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.inflight == 0 && slices.Contains(f.nowaits, true)
		}
		var first atomic.Bool
		e, _ := testEngine(t, context.Background(), f, engineConfig{slots: 2, each: true}, 3,
			func(context.Context, *Message) error {
				if first.CompareAndSwap(false, true) {
					for !quickEmpty() { // p stays leased until then
						time.Sleep(time.Millisecond)
					}
				}
				return nil
			})
		start := time.Now()
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		// On the bubble's clock: the minute's pause was cut.
		if d := time.Since(start); d >= time.Second {
			t.Fatalf("the run took %v: the pause was not cut by the settle", d)
		}
		if left := f.left(); len(left) != 0 {
			t.Fatalf("left %v", left)
		}
	})
}

// With no settle before the pause runs out (a long handler), the next pop
// waits: never two pops that do not wait with no settle between them.
func TestFetchNoSettleThenLongPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(1)
		short := 1
		f.quickMs = &short
		f.popWait = 10 * time.Millisecond
		f.add("p", 1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		e, _ := testEngine(t, ctx, f, engineConfig{slots: 2, each: true}, 0,
			func(context.Context, *Message) error {
				// In hand (no settle) until a few pops went by.
				for {
					if len(f.nowaitsNow()) >= 8 {
						cancel()
						return nil
					}
					time.Sleep(time.Millisecond)
				}
			})
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		w := f.nowaitsNow()
		if !slices.Contains(w, true) {
			t.Fatalf("pops %v: none did not wait beside the message in hand", w)
		}
		for i := 3; i < len(w); i++ { // after the first pops of the two handlers (and a long poll)
			if w[i] && w[i-1] {
				t.Fatalf("pops %v: two that did not wait in a row, with no settle between", w)
			}
		}
	})
}

// A contended loop parks one long poll at a time: handlers beyond it stay
// free, so that the partition its acks free gets its pop at once instead
// of waiting for a parked poll's re-check. One partition, one message a
// pop, a second each, four handlers, the broker's empty long polls ten
// seconds long: the third message starts after two seconds, not twenty.
func TestFetchContendedParksOneLongPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(1)
		f.popWait = 10 * time.Second
		f.add("p", 3)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		start := time.Now()
		var third time.Duration
		calls := 0
		e, _ := testEngine(t, ctx, f, engineConfig{slots: 4, each: true}, 0,
			func(context.Context, *Message) error {
				if calls++; calls == 3 {
					third = time.Since(start)
					cancel()
				}
				time.Sleep(time.Second)
				return nil
			})
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		most := f.maxWait
		f.mu.Unlock()
		if most > 1 {
			t.Errorf("%d long polls parked at once, want at most 1", most)
		}
		if third > 3*time.Second || len(f.left()) != 0 {
			t.Errorf("the third message of a second each started after %v (left %v): freed partitions waited for parked polls", third, f.left())
		}
	})
}

// With the default backoff (50 ms doubling to 200 ms, ±20 % jitter), a
// loop resumes within 240 ms of the broker's return: the first message is
// handled at most one capped backoff after the last failed pop. On the
// bubble's clock, whatever the machine's load.
func TestFetchResumesWithinCappedBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.add("p", 4)
		refused := fmt.Errorf("queen: transport: %w", syscall.ECONNREFUSED)
		for range 8 { // 50, 100, 200, 200 ... ms: well past the cap
			f.popErrs = append(f.popErrs, refused)
		}
		start := time.Now()
		var lastFailure, firstMessage time.Duration
		e, _ := testEngine(t, context.Background(), f, engineConfig{each: true}, 4,
			func(context.Context, *Message) error {
				if firstMessage == 0 {
					firstMessage = time.Since(start)
				}
				return nil
			})
		e.cfg.retry = RetryPolicy{} // the client's default
		failures := 0
		e.on.onLoopError = func(context.Context, error) { failures++; lastFailure = time.Since(start) }
		if err := runEngine(t, e); err != nil {
			t.Fatal(err)
		}
		if failures != 8 || len(f.left()) != 0 {
			t.Fatalf("%d failures, left %v; want the 8 failures and nothing left", failures, f.left())
		}
		if resumed := firstMessage - lastFailure; resumed < 160*time.Millisecond || resumed > 240*time.Millisecond {
			t.Fatalf("first message %v after the last failure, want one capped backoff (200 ms ±20 %%)", resumed)
		}
	})
}
