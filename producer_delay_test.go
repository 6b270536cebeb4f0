package queen_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// inProcess is a RoundTripper that serves each request with the broker's
// handler on the caller's goroutine, and notes when each push arrived (in
// the synctest bubble's time).
type inProcess struct {
	srv     *queentest.Server
	latency time.Duration // of each push, in bubble time
	mu      sync.Mutex
	pushes  []time.Time
}

func (rt *inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Path == "/api/v1/push" {
		rt.mu.Lock()
		rt.pushes = append(rt.pushes, time.Now())
		rt.mu.Unlock()
	}
	rec := httptest.NewRecorder()
	rt.srv.ServeHTTP(rec, req)
	if req.URL.Path == "/api/v1/push" {
		time.Sleep(rt.latency)
	}
	return rec.Result(), nil
}

func (rt *inProcess) arrivals() []time.Time {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return append([]time.Time(nil), rt.pushes...)
}

// The delay bound on a lone message, in a synctest bubble: with a batch
// delay a lone message goes exactly when the delay has passed, not before;
// without one it goes at once; a batch that reaches its count or its bytes
// goes at once whatever the delay.
func TestProducerDelayBound(t *testing.T) {
	cases := []struct {
		name  string
		delay time.Duration
		count int
		bytes int
		push  int
		want  time.Duration
	}{
		{"lone message waits the delay", 5 * time.Millisecond, 100, 1 << 20, 1, 5 * time.Millisecond},
		{"no delay: at once", 0, 100, 1 << 20, 1, 0},
		{"count reached: at once", time.Hour, 3, 1 << 20, 3, 0},
		{"bytes reached: at once", time.Hour, 100, 1, 1, 0},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A broker of its own, used only in the bubble (its state's
			// channels are made there) and closed there.
			srv := queentest.NewServer()
			synctest.Test(t, func(t *testing.T) {
				defer srv.Close()
				rt := &inProcess{srv: srv}
				c, err := queen.New(srv.URL, queen.WithHTTPClient(&http.Client{Transport: rt}))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close(context.Background())
				p, err := c.Queue("delay-"+string(rune('a'+i))).Producer(queen.WithBatchDelay(tc.delay),
					queen.WithBatchCount(tc.count), queen.WithBatchBytes(tc.bytes))
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				var last *queen.PendingPush
				for j := range tc.push {
					last = p.Push(context.Background(), payload(j))
				}
				if tc.want > 0 {
					time.Sleep(tc.want - time.Nanosecond)
					synctest.Wait()
					if n := len(rt.arrivals()); n != 0 {
						t.Fatalf("%d pushes before the delay", n)
					}
				}
				res, err := last.Wait(context.Background())
				if err != nil || res.Status != queen.PushQueued {
					t.Fatalf("%+v %v", res, err)
				}
				got := rt.arrivals()
				if len(got) != 1 || got[0].Sub(start) != tc.want {
					t.Fatalf("pushes at %v after the start, want one at %v", sinceAll(got, start), tc.want)
				}
				if err := p.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

func sinceAll(ts []time.Time, start time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Sub(start)
	}
	return out
}

// A message pushed while its partition's batch is on the wire waits the
// delay from the moment that batch is settled (not from its own push), so
// that the callers of the settled batch can join it.
func TestProducerDelayAfterSettle(t *testing.T) {
	srv := queentest.NewServer()
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		rt := &inProcess{srv: srv, latency: 2 * time.Millisecond}
		c, err := queen.New(srv.URL, queen.WithHTTPClient(&http.Client{Transport: rt}))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p, err := c.Queue("settle").Producer(queen.WithBatchDelay(5 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		a := p.Push(context.Background(), payload(1)) // sent at 5 ms, settled at 7 ms
		time.Sleep(6 * time.Millisecond)
		b := p.Push(context.Background(), payload(2)) // pushed at 6 ms, during a's flight
		for _, pp := range []*queen.PendingPush{a, b} {
			if err := waitErr(pp); err != nil {
				t.Fatal(err)
			}
		}
		got := sinceAll(rt.arrivals(), start)
		if len(got) != 2 || got[0] != 5*time.Millisecond || got[1] != 12*time.Millisecond {
			t.Fatalf("pushes at %v, want at 5ms and 12ms (5 ms after the first was settled)", got)
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}
