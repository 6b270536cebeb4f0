package queen_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// partitionCounter is a RoundTripper that counts, per push request body,
// the items of partition "a" before the request goes out.
type partitionCounter struct {
	next http.RoundTripper
	a    atomic.Int64
}

func (pc *partitionCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil && strings.HasSuffix(r.URL.Path, "/push") {
		body, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		pc.a.Add(int64(strings.Count(string(body), `"partition":"a"`)))
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	return pc.next.RoundTrip(r)
}

// While a callback of a partition's batch runs, the partition's next batch
// is not sent (not even in another partition's request), and the
// partition's callbacks come in push order, one batch after the other; a
// callback may push.
func TestProducerCallbacksHoldTheNextBatch(t *testing.T) {
	srv := queentest.Start(t)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	pc := &partitionCounter{next: tr}
	c := newProducerClient(t, srv, queen.WithHTTPClient(&http.Client{Transport: pc}))
	entered, release, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var seen []string
	var p *queen.Producer
	var pushedA3 *queen.PendingPush
	record := func(s string) {
		mu.Lock()
		seen = append(seen, s)
		mu.Unlock()
	}
	p, err := c.Queue("held").Producer(queen.WithMaxInflight(2), queen.WithOnResult(func(r queen.PushResult, err error) {
		if err != nil {
			t.Errorf("%s: %v", r.TransactionID, err)
		}
		if !strings.HasPrefix(r.TransactionID, "a") {
			return
		}
		record(r.TransactionID)
		if r.TransactionID == "a1" {
			close(entered)
			<-release
			pushedA3 = p.Partition("a").Push(context.Background(), queen.Item{Payload: payload(3), TransactionID: "a3"})
			record("a1 returned")
			close(returned)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := p.Partition("a")
	a1 := a.Push(ctx, queen.Item{Payload: payload(1), TransactionID: "a1"})
	<-entered
	a2 := a.Push(ctx, queen.Item{Payload: payload(2), TransactionID: "a2"})
	// b's worker takes the last free request slot: it would carry a's
	// ready batch too, were a not held by its callback.
	if err := waitErr(p.Partition("b").Push(ctx, queen.Item{Payload: payload(10), TransactionID: "b1"})); err != nil {
		t.Fatal(err)
	}
	if n := pc.a.Load(); n != 1 {
		t.Fatalf("%d messages of partition a sent while a1's callback runs, want 1 (a1 itself)", n)
	}
	select {
	case <-a2.Done():
		t.Fatal("a2 settled while a1's callback runs")
	default:
	}
	close(release)
	<-returned
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, pp := range []*queen.PendingPush{a1, a2, pushedA3} {
		if err := waitErr(pp); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"a1", "a1 returned", "a2", "a3"}; !slices.Equal(seen, want) {
		t.Fatalf("callbacks of partition a: %q, want %q", seen, want)
	}
	if n := pc.a.Load(); n != 3 {
		t.Fatalf("%d messages of partition a sent, want 3", n)
	}
}

// ProducerError.Err is the failure of the earliest pushed message, whatever
// the order the producer holds its partitions in.
func TestProducerErrorIsEarliest(t *testing.T) {
	// A few rounds: a pick in the producer's map order would hit the
	// earliest by chance 1 in 16 times each.
	for round := range 4 {
		earliestRound(t, round)
	}
}

func earliestRound(t *testing.T, round int) {
	t.Helper()
	srv := queentest.Start(t)
	c, err := queen.New(srv.URL, queen.WithRetryPolicy(queen.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	const parts = 16
	p, err := c.Queue("earliest"+strconv.Itoa(round)).Producer(queen.WithBatchDelay(time.Hour), queen.WithMaxInflight(parts+1), oneSend)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx := context.Background()
	var pps []*queen.PendingPush
	for i := range parts {
		pps = append(pps, p.Partition("p"+strconv.Itoa(i)).Push(ctx, payload(i)))
	}
	// Flush sends each partition in a request of its own (a slot each,
	// so none gathers another's), each refused with its own error value.
	srv.FailNext(queentest.RoutePush, parts, 400, 0)
	err = p.Flush(ctx)
	var pe *queen.ProducerError
	if !errors.As(err, &pe) || pe.NotStored != parts {
		t.Fatalf("Flush: %v", err)
	}
	want := waitErr(pps[0])
	for _, pp := range pps[1:] {
		if waitErr(pp) == want {
			t.Fatal("two requests failed with the same error value: the test cannot tell them apart")
		}
	}
	if pe.Err != want {
		t.Fatalf("round %d: ProducerError.Err is not the first pushed message's error", round)
	}
}
