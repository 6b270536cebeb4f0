package queen_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

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
