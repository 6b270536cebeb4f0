package queen

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each outcome is acked as soon as the sender is free, a partition's in
// order: with a handler that takes a while (a millisecond), and holds each
// message until the ack of the one before was answered, every message
// goes in a request of its own. A Retry gives back the rest of the
// partition in the same request.
func TestSettleAsWorkCompletes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.add("p", 4)
		e, _ := testEngine(t, context.Background(), f, engineConfig{each: true}, 4,
			func(_ context.Context, m *Message) error {
				time.Sleep(time.Millisecond) // not a quick call: its ack does not linger
				synctest.Wait()              // the ack of the message before is answered
				return nil
			})
		retried := false
		e.on.onSuccess = func(_ context.Context, m *Message) Outcome {
			if m.TransactionID == "p/2" && !retried {
				retried = true
				return Retry()
			}
			return Complete()
		}
		require.NoError(t, runEngine(t, e))
		var got []string
		for _, s := range f.settles() {
			got = append(got, strings.Join(statuses([][]Settlement{s}), " "))
		}
		// The Limit (4 calls) asks the second pop for the one message left.
		assert.Equal(t, []string{"p/0:completed", "p/1:completed", "p/2:retry p/3:retry", "p/2:completed"}, got)
	})
}

// Quick calls (a handler that returns at once) of one partition gather
// their acks: a pop of 50 such messages costs one ack request, sent by
// ackLinger after the first at the latest, at once when the partition is
// done; slow calls (a millisecond each) go one by one.
func TestSettleQuickCallsGather(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sleep time.Duration
		acks  int
	}{{"quick", 0, 1}, {"slow", time.Millisecond, 50}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeBroker(50)
				f.add("p", 50)
				e, _ := testEngine(t, context.Background(), f, engineConfig{each: true}, 50,
					func(context.Context, *Message) error {
						time.Sleep(tc.sleep)
						synctest.Wait() // whatever can happen meanwhile has
						return nil
					})
				require.NoError(t, runEngine(t, e))
				assert.Len(t, f.settles(), tc.acks)
				assert.Empty(t, f.left())
			})
		})
	}
}

// An ack that fails on the way is sent again until it goes through; one
// the broker refuses item by item is not; each failure reaches the hook.
func TestSettleRetriesTransientOnly(t *testing.T) {
	for _, tc := range []struct {
		name  string
		errs  []error
		sends int
	}{
		{"503 then network", []error{&BrokerError{Status: 503}, errors.New("connection reset")}, 3},
		{"refused items", []error{&AckError{Results: []AckResult{{TransactionID: "p/0", Error: "invalid lease"}}}}, 1},
		{"400", []error{&BrokerError{Status: 400}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeBroker(10)
			f.add("p", 1)
			f.setErrs = tc.errs
			var hooked atomic.Int32
			e, logs := testEngine(t, context.Background(), f, engineConfig{each: true}, 1,
				func(context.Context, *Message) error { return nil })
			e.on.onLoopError = func(_ context.Context, err error) {
				var le *LoopError
				if errors.As(err, &le) && le.Op == LoopOpSettle && le.Messages == 1 {
					hooked.Add(1)
				}
			}
			if err := runEngine(t, e); err != nil {
				t.Fatal(err)
			}
			if n := len(f.settles()); n != tc.sends {
				t.Fatalf("%d ack requests, want %d", n, tc.sends)
			}
			if int(hooked.Load()) != len(tc.errs) {
				t.Fatalf("hook got %d settle failures, want %d", hooked.Load(), len(tc.errs))
			}
			if out := logs.String(); !strings.Contains(out, "level=WARN") && !strings.Contains(out, "level=ERROR") {
				t.Fatalf("settle failure not logged:\n%s", logs.String())
			}
		})
	}
}

// An outage of the acks is logged at its start and end, at Warn (the end
// with how many attempts failed and for how long), the attempts between
// at Debug; OnLoopError gets every failed attempt; the attempts wait the
// loop's backoff between them; the acks go through once the broker
// answers.
func TestSettleOutageLoggedAtItsStartAndEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.add("p", 2)
		unavailable := &BrokerError{Status: 503, Message: "no leader"}
		for range 6 {
			f.setErrs = append(f.setErrs, unavailable)
		}
		var hooked atomic.Int32
		e, logs := testEngine(t, context.Background(), f, engineConfig{each: true}, 2,
			func(context.Context, *Message) error { return nil })
		e.on.onLoopError = func(_ context.Context, err error) {
			if le, ok := errors.AsType[*LoopError](err); ok && le.Op == LoopOpSettle {
				hooked.Add(1)
			}
		}
		start := time.Now()
		require.NoError(t, runEngine(t, e))
		// Six failed attempts wait the backoff of testEngine's RetryPolicy
		// after each (1+2+4×4 ms, less a jitter of at most a fifth).
		assert.GreaterOrEqual(t, time.Since(start), 15*time.Millisecond, "the acks were sent again without a backoff")
		assert.Empty(t, f.left(), "the acks never went through")
		assert.Equal(t, int32(6), hooked.Load())
		out := logs.String()
		assert.Equal(t, 1, strings.Count(out, `level=WARN msg="queen: ack failed; the loop sends it again"`), out)
		assert.Equal(t, 5, strings.Count(out, `level=DEBUG msg="queen: ack failed again"`), out)
		assert.Equal(t, 1, strings.Count(out, `level=WARN msg="queen: acks succeed again"`), out)
		assert.Contains(t, out, "failures=6")
		assert.Equal(t, 2, strings.Count(out, "level=WARN"), out)
	})
}

// An ack whose first attempt got no answer (the outcome unknown: the
// broker may have applied it and ended the lease) and whose next attempt
// is refused is logged for what it most likely is, an ack that first
// attempt applied: at Info, not as a refusal at Warn, and not handed to
// OnLoopError as a failure (the lost answer was).
func TestSettleRefusalAfterLostAnswerIsNoRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.add("p", 1)
		f.setErrs = []error{
			outcomeUnknown(errors.New("transport: no answer: EOF")),
			&AckError{Results: []AckResult{{TransactionID: "p/0", Error: "Invalid or expired lease"}}},
		}
		var hooked []error
		e, logs := testEngine(t, context.Background(), f, engineConfig{each: true}, 1,
			func(context.Context, *Message) error { return nil })
		e.on.onLoopError = func(_ context.Context, err error) { hooked = append(hooked, err) }
		require.NoError(t, runEngine(t, e))
		require.Len(t, f.settles(), 2)
		out := logs.String()
		assert.NotContains(t, out, "broker refused", out)
		assert.Contains(t, out, `level=INFO msg="queen: acks refused after an attempt whose answer was lost`, out)
		require.Len(t, hooked, 1, "OnLoopError got the refusal of an ack the lost attempt applied")
		assert.ErrorIs(t, hooked[0], ErrOutcomeUnknown)
	})
}

// A job of more than ackChunk acks is cut into up to Concurrency requests
// of at least ackChunk acks each, at part boundaries (a part's acks stay
// in one request, in order); the sender sends them at once.
func TestSettleSplitsLargeJobs(t *testing.T) {
	for _, tc := range []struct {
		slots int
		parts []int
		want  string
	}{
		{1, []int{60, 60, 60, 60}, "[0 240]"},
		{4, []int{60, 60, 60, 60}, "[0 120] [120 240]"},
		{4, []int{30, 30}, "[0 60]"},
		{4, []int{250, 10}, "[0 250] [250 260]"},
		{16, []int{100, 100, 100, 100, 100}, "[0 100] [100 200] [200 300] [300 400] [400 500]"},
		{2, []int{100, 100, 100, 100, 100}, "[0 300] [300 500]"},
	} {
		l := &loop{cfg: &engineConfig{slots: tc.slots}}
		j := &job{}
		for _, n := range tc.parts {
			j.parts = append(j.parts, &part{sending: n})
			j.acks = append(j.acks, make([]Settlement, n)...)
		}
		l.split(j)
		var got []string
		for _, r := range j.reqs {
			got = append(got, fmt.Sprint([]int{r.from, r.to}))
		}
		assert.Equal(t, tc.want, strings.Join(got, " "), "slots %d, parts %v", tc.slots, tc.parts)
	}
}

// A job split into requests, one of which fails on the way: the acks of
// the requests answered are done, those of the failed one go again. While
// the first job's requests are held, the four partitions complete; every
// job of 300 acks or more is cut into requests sent at once.
func TestSettleSplitJobPartlyFailing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(400)
		for _, p := range []string{"a", "b", "c", "d"} {
			f.add(p, 100)
		}
		f.setGate = make(chan struct{})
		var calls atomic.Int32
		e, _ := testEngine(t, context.Background(), f, engineConfig{each: true, slots: 4}, 400,
			func(context.Context, *Message) error {
				if calls.Add(1) == 1 {
					time.Sleep(time.Millisecond) // not quick: its ack goes at once, and waits at the gate
				}
				return nil
			})
		go func() {
			for calls.Load() < 400 {
				time.Sleep(time.Millisecond)
			}
			synctest.Wait()
			f.mu.Lock()
			f.setErrs = []error{&BrokerError{Status: 503}} // one of the next requests
			gate := f.setGate
			f.setGate = nil
			f.mu.Unlock()
			close(gate)
		}()
		require.NoError(t, runEngine(t, e))
		assert.Empty(t, f.left())
		settles := f.settles()
		sizes := make([]int, len(settles))
		seen := map[string]int{}
		for i, s := range settles {
			sizes[i] = len(s)
			for _, a := range s {
				seen[a.Message.TransactionID]++
			}
		}
		assert.Len(t, seen, 400)
		f.mu.Lock()
		assert.Empty(t, f.setErrs, "no request met the 503")
		f.mu.Unlock()
		// Nothing went in one request of 300 or more: the jobs were cut
		// (the requests of the one that met the 503 sent again).
		total := 0
		for _, n := range sizes {
			total += n
			assert.Less(t, n, 300, "sizes %v", sizes)
		}
		assert.Greater(t, total, 400, "nothing was sent again: sizes %v", sizes)
	})
}

// While an ack is on its way, what completes waits for the next one,
// unless it is a batch's worth (ackChunk acks or more), which goes beside
// it.
func TestSettleBatchGoesBesideAckInFlight(t *testing.T) {
	for _, tc := range []struct {
		quick   int // the quick messages of partition b
		besides bool
	}{{5, false}, {ackChunk, true}} {
		t.Run(fmt.Sprint(tc.quick), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeBroker(1000)
				f.add("a", 1)
				f.add("b", tc.quick)
				f.setGate = make(chan struct{})
				e, _ := testEngine(t, context.Background(), f, engineConfig{each: true, slots: 2}, 1+tc.quick,
					func(_ context.Context, m *Message) error {
						if m.PartitionID == "b" {
							time.Sleep(100 * time.Microsecond) // quick calls; a's one message acked first, held at the gate
						}
						return nil
					})
				done := make(chan error, 1)
				go func() { done <- runEngine(t, e) }()
				time.Sleep(time.Second) // b is done meanwhile
				synctest.Wait()
				f.mu.Lock()
				setting := f.setting
				gate := f.setGate
				f.setGate = nil
				f.mu.Unlock()
				close(gate)
				require.NoError(t, <-done)
				if tc.besides {
					assert.Equal(t, 2, setting, "b's batch waited for a's ack")
				} else {
					assert.Equal(t, 1, setting, "b's few acks went beside a's")
				}
				assert.Len(t, f.settles(), 2)
				assert.Empty(t, f.left())
			})
		})
	}
}

// A renewal does not wait behind an ack on its way.
func TestSettleRenewalBesideAck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.add("a", 1)
		f.add("b", 1)
		f.setGate = make(chan struct{})
		var renewed atomic.Bool
		e, _ := testEngine(t, context.Background(), f, engineConfig{each: true, slots: 2, renewEvery: time.Second, renewSecs: 3}, 2,
			func(_ context.Context, m *Message) error {
				if m.PartitionID == "b" {
					time.Sleep(3 * time.Second) // its pop is renewed meanwhile, a's ack held at the gate
					f.mu.Lock()
					renewed.Store(f.renews["L1"] >= 2)
					gate := f.setGate
					f.setGate = nil
					f.mu.Unlock()
					close(gate)
				}
				return nil
			})
		require.NoError(t, runEngine(t, e))
		assert.True(t, renewed.Load(), "the renewals waited behind the ack")
		assert.Empty(t, f.left())
	})
}

// Acks that linger (quick calls) when the backoff after a failed ack ends
// go when their linger ends, not at the next unrelated event (here the
// slow handler's end, 100 ms later).
func TestSettleLingerAfterBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(10)
		f.add("p", 3)
		f.setErrs = []error{errors.New("connection reset")}
		var seen []string
		e, _ := testEngine(t, context.Background(), f, engineConfig{each: true}, 3,
			func(_ context.Context, m *Message) error {
				switch m.TransactionID {
				case "p/0":
					time.Sleep(10 * time.Millisecond) // slow: its ack goes at once, and fails
				case "p/1":
					synctest.Wait() // quick, once p/0's ack failed and the backoff began
				case "p/2":
					time.Sleep(100 * time.Millisecond)
					seen = statuses(f.settles())
				}
				return nil
			})
		e.cfg.retry = RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond} // ends before p/1's linger
		require.NoError(t, runEngine(t, e))
		assert.Contains(t, seen, "p/1:completed", "p/1's ack waited for an unrelated event")
	})
}

// The quick-call measure is the handler's time alone: a slow outcome
// callback does not make a quick handler's acks go one by one.
func TestSettleQuickIsTheHandlersTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeBroker(50)
		f.add("p", 50)
		e, _ := testEngine(t, context.Background(), f, engineConfig{each: true}, 50,
			func(context.Context, *Message) error { return nil })
		e.on.onSuccess = func(context.Context, *Message) Outcome {
			time.Sleep(time.Millisecond / 2)
			synctest.Wait()
			return Complete()
		}
		require.NoError(t, runEngine(t, e))
		assert.Less(t, len(f.settles()), 25, "a quick handler's acks went one by one")
		assert.Empty(t, f.left())
	})
}
