package queen_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// refusing is a RoundTripper for a test in a synctest bubble: it serves
// each request with the broker's handler on the caller's goroutine (no
// connection, which would keep the bubble's clock from moving), and during
// a refusal window, on the bubble's clock, refuses it with the error
// net/http gives for a refused connection. It is queentest's
// RefuseConnections (listener down, state kept) for a bubble, whose
// goroutines cannot share RefuseConnections' WaitGroup with the broker's.
type refusing struct {
	srv   *queentest.Server
	mu    sync.Mutex
	until time.Time // the end of the refusal window
	// gate, when set, holds every push until it is closed.
	gate chan struct{}
	// refused counts the refused requests.
	refused int
}

func (rt *refusing) refuse(d time.Duration) {
	rt.mu.Lock()
	rt.until = time.Now().Add(d)
	rt.mu.Unlock()
}

func (rt *refusing) RoundTrip(req *http.Request) (*http.Response, error) {
	rt.mu.Lock()
	if time.Now().Before(rt.until) {
		rt.refused++
		rt.mu.Unlock()
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	}
	gate := rt.gate
	rt.mu.Unlock()
	if gate != nil && req.URL.Path == "/api/v1/push" {
		<-gate
	}
	rec := httptest.NewRecorder()
	rt.srv.ServeHTTP(rec, req)
	return rec.Result(), nil
}

func (rt *refusing) refusals() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.refused
}

// outageClient is a client of srv for a bubble, with the default retry
// policy.
func outageClient(t *testing.T, srv *queentest.Server) (*queen.Client, *refusing) {
	t.Helper()
	rt := &refusing{srv: srv}
	c, err := queen.New(srv.URL, queen.WithHTTPClient(&http.Client{Transport: rt}))
	if err != nil {
		t.Fatal(err)
	}
	return c, rt
}

// pushEach pushes n messages one per Push, spread over parts partitions of
// p (message i to partition i%parts), and returns their PendingPush.
func pushEach(p *queen.Producer, n, parts int) []*queen.PendingPush {
	out := make([]*queen.PendingPush, n)
	for i := range n {
		out[i] = p.Partition("p"+strconv.Itoa(i%parts)).Push(context.Background(), payload(i))
	}
	return out
}

// A refusal window far longer than the transport's budget (4 attempts,
// about 1.5 s): the producer keeps its batches, sends them again with
// backoff, and stores every message once, in order, when the broker
// listens again.
func TestProducerRidesOutRefusal(t *testing.T) {
	srv := queentest.NewServer()
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		c, rt := outageClient(t, srv)
		defer c.Close(context.Background())
		p, err := c.Queue("outage").Producer()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		rt.refuse(20 * time.Second)
		pending := pushEach(p, 400, 8)
		for i, pp := range pending {
			res, err := pp.Wait(context.Background())
			if err != nil || res.Status != queen.PushQueued {
				t.Fatalf("message %d: %+v %v", i, res, err)
			}
		}
		if took := time.Since(start); took < 20*time.Second {
			t.Fatalf("stored after %v, before the broker listened again", took)
		}
		// The transport alone (4 attempts, its waits 1.7 s at most) would
		// have failed them long before the broker came back.
		if rt.refusals() <= 4 {
			t.Fatalf("%d refused sends", rt.refusals())
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		counts, order := stored(t, c, "outage")
		if len(counts) != 400 {
			t.Fatalf("%d stored", len(counts))
		}
		for part, ns := range order {
			for i := 1; i < len(ns); i++ {
				if ns[i] <= ns[i-1] {
					t.Fatalf("partition %s out of order: %v", part, ns)
				}
			}
		}
		for n, k := range counts {
			if k != 1 {
				t.Fatalf("message %d stored %d times", n, k)
			}
		}
	})
}

// A delivery timeout shorter than the outage: the batches on the wire fail
// with ErrDeliveryTimeout and ErrNotSent (every send refused: nothing
// stored), the messages buffered behind them with a *PartitionFailedError
// that reaches that cause; once the broker is back every partition takes
// pushes again.
func TestProducerDeliveryTimeoutShorterThanOutage(t *testing.T) {
	srv := queentest.NewServer()
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		c, rt := outageClient(t, srv)
		defer c.Close(context.Background())
		p, err := c.Queue("short").Producer(queen.WithDeliveryTimeout(5*time.Second), queen.WithBatchCount(10))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		rt.refuse(30 * time.Second)
		pending := pushEach(p, 400, 8)
		var timedOut, behind int
		for i, pp := range pending {
			_, err := pp.Wait(context.Background())
			var pf *queen.PartitionFailedError
			switch {
			case err == nil:
				t.Fatalf("message %d stored during the outage", i)
			case errors.Is(err, queen.ErrOutcomeUnknown) && !errors.As(err, &pf):
				t.Fatalf("message %d: %v; nothing was sent, so the outcome is known", i, err)
			case !errors.Is(err, queen.ErrNotSent):
				t.Fatalf("message %d: %v; want ErrNotSent", i, err)
			case errors.As(err, &pf):
				behind++
				if !errors.Is(pf.Cause, queen.ErrDeliveryTimeout) || pf.Queue != "short" {
					t.Fatalf("message %d: %+v", i, pf)
				}
			case errors.Is(err, queen.ErrDeliveryTimeout):
				timedOut++
			default:
				t.Fatalf("message %d: %v", i, err)
			}
		}
		// No send starts after the delivery timeout, counted from each
		// message's push (on the bubble's clock: the sends take no time).
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("the batches failed after %v, past their delivery timeout", took)
		}
		if timedOut == 0 || behind == 0 || timedOut+behind != 400 {
			t.Fatalf("%d timed out, %d behind them", timedOut, behind)
		}
		err = p.Flush(context.Background())
		if err != nil {
			t.Fatalf("Flush after every message settled: %v", err)
		}
		time.Sleep(30 * time.Second) // the broker listens again
		for part := range 8 {
			pp := p.Partition("p"+strconv.Itoa(part)).Push(context.Background(), payload(1000+part))
			if _, err := pp.Wait(context.Background()); err != nil {
				t.Fatalf("partition p%d after the outage: %v", part, err)
			}
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if counts, _ := stored(t, c, "short"); len(counts) != 8 {
			t.Fatalf("stored %v, want only the 8 pushes after the outage", counts)
		}
	})
}

// 503 and 429 answers past the transport's budget: sent again, stored once.
func TestProducerRetriesRefusalsPastTransportBudget(t *testing.T) {
	srv := queentest.NewServer()
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		c, _ := outageClient(t, srv)
		defer c.Close(context.Background())
		p, err := c.Queue("busy").Producer(queen.WithMaxInflight(1))
		if err != nil {
			t.Fatal(err)
		}
		// 8 refusals in a row, twice the transport's attempts: waits of
		// 0.2 to 3.2 s, then 6.4 s and 10 s (the cap) past the Retry-After.
		srv.FailNext(queentest.RoutePush, 5, 503, 0)
		srv.FailNext(queentest.RoutePush, 3, 429, 2*time.Second)
		for i, pp := range pushEach(p, 20, 1) {
			if _, err := pp.Wait(context.Background()); err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if counts, _ := stored(t, c, "busy"); len(counts) != 20 {
			t.Fatalf("stored %v", counts)
		}
	})
}

// Close whose ctx ends during an outage: the batches waiting to be sent
// again fail at once (ErrClosed, and ErrNotSent as nothing was sent), and
// no goroutine is left.
func TestProducerCloseDuringOutage(t *testing.T) {
	srv := queentest.NewServer()
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		c, rt := outageClient(t, srv)
		defer c.Close(context.Background())
		p, err := c.Queue("closing").Producer()
		if err != nil {
			t.Fatal(err)
		}
		rt.refuse(time.Hour)
		pending := pushEach(p, 50, 4)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = p.Close(ctx)
		var pe *queen.ProducerError
		if !errors.As(err, &pe) || pe.NotStored != 50 || pe.Unknown != 0 || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close: %v", err)
		}
		for _, pp := range pending {
			if err := waitErr(pp); !errors.Is(err, queen.ErrClosed) || !errors.Is(err, queen.ErrNotSent) {
				t.Fatalf("after Close: %v", err)
			}
		}
		synctest.Wait() // every goroutine of the bubble has ended or waits
	})
}

// The same over the network, with queentest's own RefuseConnections (its
// listener down for a while, its state kept): a refusal window longer than
// the transport's budget of the fast retry policy (8 attempts, 5 ms apart
// at most), and the default delivery timeout. Every message is stored
// once. (Timing is the bubble tests'; this one shows the real dial path.)
func TestProducerRidesOutRefusedConnections(t *testing.T) {
	defer noProducerGoroutine(t)
	srv := queentest.Start(t)
	c := newProducerClient(t, srv)
	p, err := c.Queue("refused").Producer()
	if err != nil {
		t.Fatal(err)
	}
	// A first push opens a connection: the broker closes it as the window
	// begins, and a request written on it before the client saw that may
	// have reached the broker: it is then sent again, deduplicated.
	if err := waitErr(p.Push(context.Background(), payload(-1))); err != nil {
		t.Fatal(err)
	}
	srv.RefuseConnections(500 * time.Millisecond)
	for i, pp := range pushEach(p, 200, 8) {
		if err := waitErr(pp); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	counts, _ := stored(t, c, "refused")
	if len(counts) != 201 {
		t.Fatalf("%d stored", len(counts))
	}
	for n, k := range counts {
		if k != 1 {
			t.Fatalf("message %d stored %d times", n, k)
		}
	}
}

// By default a batch that fails for good (here refused with a 400) fails
// the messages buffered behind it in its partition, with a
// *PartitionFailedError that matches ErrNotSent and reaches the batch's
// *BrokerError; the partition is not paused: a later push is stored.
func TestProducerFailureFailsOnlyWhatIsBehind(t *testing.T) {
	srv := queentest.NewServer()
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		c, rt := outageClient(t, srv)
		defer c.Close(context.Background())
		rt.gate = make(chan struct{})
		p, err := c.Queue("behind").Producer(queen.WithBatchCount(5), queen.WithBatchDelay(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		srv.FailNext(queentest.RoutePush, 1, http.StatusBadRequest, 0)
		pending := pushEach(p, 12, 1) // 5 go at once (held at the gate), 7 wait behind them
		synctest.Wait()
		close(rt.gate)
		for i, pp := range pending {
			err := waitErr(pp)
			var be *queen.BrokerError
			var pf *queen.PartitionFailedError
			switch {
			case i < 5:
				if !errors.As(err, &be) || be.Status != http.StatusBadRequest || errors.As(err, &pf) {
					t.Fatalf("message %d of the batch: %v", i, err)
				}
			default:
				if !errors.As(err, &pf) || !errors.Is(err, queen.ErrNotSent) || !errors.As(err, &be) ||
					errors.Is(err, queen.ErrPartitionPaused) || pf.Partition != "p0" {
					t.Fatalf("message %d behind the batch: %v", i, err)
				}
			}
		}
		after := p.Partition("p0").Push(context.Background(), payload(99))
		if err := p.Flush(context.Background()); err != nil || waitErr(after) != nil {
			t.Fatalf("push after the failure: %v %v", err, waitErr(after))
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if counts, _ := stored(t, c, "behind"); len(counts) != 1 || counts[99] != 1 {
			t.Fatalf("stored %v", counts)
		}
	})
}

// buffering is a RoundTripper for a bubble that answers the first n pushes
// as a 0.15.1 broker whose database is failing does: every item "buffered"
// (kept in the broker's file, stored later), nothing stored now. Later
// pushes reach srv.
type buffering struct {
	srv    *queentest.Server
	mu     sync.Mutex
	n      int // pushes still to answer "buffered"
	pushes int
}

func (rt *buffering) RoundTrip(req *http.Request) (*http.Response, error) {
	rt.mu.Lock()
	isPush := req.URL.Path == "/api/v1/push"
	if isPush {
		rt.pushes++
	}
	buffer := isPush && rt.n > 0
	if buffer {
		rt.n--
	}
	rt.mu.Unlock()
	if buffer {
		var body struct{ Items []json.RawMessage }
		if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
			return nil, err
		}
		answer := make([]map[string]string, len(body.Items))
		for i := range answer {
			answer[i] = map[string]string{"status": "buffered", "queue": "buf"}
		}
		rec := httptest.NewRecorder()
		rec.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rec).Encode(answer)
		return rec.Result(), nil
	}
	rec := httptest.NewRecorder()
	rt.srv.ServeHTTP(rec, req)
	return rec.Result(), nil
}

// A 0.15.1 "buffered" answer may pass: the producer sends the batch again
// with its transaction ids, and its partition waits, so every message is
// stored once and in push order (the broker's later replay of its file
// finds them stored).
func TestProducerSendsBufferedAgain015(t *testing.T) {
	srv := queentest.NewServer(queentest.WithProfile(queentest.Profile015))
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		rt := &buffering{srv: srv, n: 3}
		var logs logSink
		c, err := queen.New(srv.URL, queen.WithHTTPClient(&http.Client{Transport: rt}),
			queen.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p, err := c.Queue("buf").Producer(queen.WithBatchCount(5))
		if err != nil {
			t.Fatal(err)
		}
		pending := make([]*queen.PendingPush, 20)
		for i := range pending {
			pending[i] = p.Partition("p").Push(context.Background(), payload(i))
		}
		for i, pp := range pending {
			res, err := pp.Wait(context.Background())
			if err != nil || !res.Stored() {
				t.Fatalf("message %d: %+v %v", i, res, err)
			}
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if rt.pushes < 4+3 {
			t.Fatalf("%d push requests; the 3 buffered answers were not sent again", rt.pushes)
		}
		// The resends are in the log: the failure, then the success.
		if l := logs.String(); !strings.Contains(l, "sending it again until the delivery timeout") ||
			!strings.Contains(l, "buffered by the broker") || !strings.Contains(l, "push sent again succeeds") {
			t.Fatalf("log:\n%s", l)
		}
		counts, order := stored(t, c, "buf")
		if len(counts) != 20 {
			t.Fatalf("%d stored", len(counts))
		}
		for n, k := range counts {
			if k != 1 {
				t.Fatalf("message %d stored %d times", n, k)
			}
		}
		for i, n := range order["p"] {
			if n != i {
				t.Fatalf("out of push order: %v", order["p"])
			}
		}
	})
}

// A message the broker keeps answering "buffered" fails, at its delivery
// timeout, with an error matching ErrOutcomeUnknown and *PushError (the
// broker may still store it from its file); a later push goes out.
func TestProducerBufferedUntilTimeout015(t *testing.T) {
	srv := queentest.NewServer(queentest.WithProfile(queentest.Profile015))
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		rt := &buffering{srv: srv, n: 1 << 30}
		c, err := queen.New(srv.URL, queen.WithHTTPClient(&http.Client{Transport: rt}))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		p, err := c.Queue("buf").Producer(queen.WithDeliveryTimeout(10 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		res, err := p.Push(context.Background(), payload(1)).Wait(context.Background())
		var push *queen.PushError
		if !errors.Is(err, queen.ErrOutcomeUnknown) || !errors.Is(err, queen.ErrDeliveryTimeout) || !errors.As(err, &push) || res.Stored() {
			t.Fatalf("kept buffered: %+v %v", res, err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("failed after %v, past its delivery timeout (10 s)", took)
		}
		if rt.pushes < 3 {
			t.Fatalf("%d push requests; the buffered batch was not sent again", rt.pushes)
		}
		rt.mu.Lock()
		rt.n = 0
		rt.mu.Unlock()
		if _, err := p.Push(context.Background(), payload(2)).Wait(context.Background()); err != nil {
			t.Fatalf("after a buffered failure: %v", err)
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// A broker that answers every send "not applied" (503) until the delivery
// timeout: the message fails with ErrDeliveryTimeout and the broker's
// *BrokerError, neither ErrNotSent nor ErrOutcomeUnknown, counted not
// stored.
func TestProducerDeliveryTimeoutAfterRefusals(t *testing.T) {
	srv := queentest.NewServer()
	synctest.Test(t, func(t *testing.T) {
		defer srv.Close()
		c, _ := outageClient(t, srv)
		defer c.Close(context.Background())
		srv.FailNext(queentest.RoutePush, 1000, http.StatusServiceUnavailable, 0)
		p, err := c.Queue("busy").Producer(queen.WithDeliveryTimeout(3 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Push(context.Background(), payload(1)).Wait(context.Background())
		be, ok := errors.AsType[*queen.BrokerError](err)
		if !errors.Is(err, queen.ErrDeliveryTimeout) || !ok || be.Status != http.StatusServiceUnavailable ||
			errors.Is(err, queen.ErrNotSent) || errors.Is(err, queen.ErrOutcomeUnknown) {
			t.Fatalf("Push: %v", err)
		}
		var pe *queen.ProducerError
		if err := p.Close(context.Background()); err != nil && (!errors.As(err, &pe) || pe.Unknown != 0) {
			t.Fatalf("Close: %v", err)
		}
	})
}
