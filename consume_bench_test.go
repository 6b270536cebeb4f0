package queen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// The consume loop against queentest in one process, next to a baseline
// that does the same pops and batch acks with bare net/http: one slot, one
// partition, a no-op handler per message. Each benchmark consumes b.N
// messages with each of the two, in up to 20 rounds of both (the order
// alternating), and reports:
//
//	loop-msgs/s, baseline-msgs/s  messages consumed per second, over all
//	                              rounds
//	ratio                         the median of the rounds' ratios of the
//	                              loop's rate to the baseline's
//	total-ratio                   loop-msgs/s / baseline-msgs/s
//	loop-allocs/msg, baseline-allocs/msg
//	                              heap allocations per message, the
//	                              in-process broker's included (the same
//	                              work on both sides)
//	req/1000msg                   the loop's pops, acks and renewals per
//	                              1,000 messages, counted at the broker
//
// The rounds pair the two sides in time: a burst of load on the machine
// (these are small shared machines) slows the rounds it falls in, and the
// median of the paired ratios leaves those rounds out, where the ratio of
// the totals keeps part of them; both are reported.
//
// Run: go test -run '^$' -bench BenchmarkConsume -benchtime 20000x .
func BenchmarkConsume(b *testing.B) {
	for _, batch := range []int{100, 1} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchConsume(b, batch) })
	}
}

// BenchmarkConsumeLoop is the loop alone (ns/op and allocs/op per message),
// for profiling: go test -run '^$' -bench ConsumeLoop -cpuprofile cpu.out .
func BenchmarkConsumeLoop(b *testing.B) {
	for _, batch := range []int{100, 1} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			bs := newBenchSetup(b)
			q := bs.fill(b, "loop", b.N)
			b.ReportAllocs()
			r0 := loopRequests(bs.srv)
			b.ResetTimer()
			bs.runLoop(b, q, batch, b.N)
			b.StopTimer()
			reportRequests(b, loopRequests(bs.srv)-r0, b.N)
		})
	}
}

// BenchmarkConsumeScale is the loop at scale against queentest: b.N
// messages spread over 4 or 32 partitions, consumed with Concurrency 1 or
// 16 (batch 100, a no-op handler per message). req/1000msg (pops, acks and
// renewals per 1,000 messages, counted at the broker) must not grow with
// the handlers or the partitions.
//
//	go test -run '^$' -bench ConsumeScale -benchtime 20000x .
func BenchmarkConsumeScale(b *testing.B) {
	for _, conc := range []int{1, 16} {
		for _, parts := range []int{4, 32} {
			b.Run(fmt.Sprintf("conc=%d/parts=%d", conc, parts), func(b *testing.B) {
				bs := newBenchSetup(b)
				q := bs.fillParts(b, "scale", b.N, parts)
				r0 := loopRequests(bs.srv)
				b.ResetTimer()
				start := time.Now()
				ctx := context.Background()
				err := bs.client.Queue(q).Batch(100).Concurrency(conc).Each().Limit(b.N).
					Consume(ctx, func(_ context.Context, m *queen.Message) error {
						benchSink += len(m.Raw)
						return nil
					}).Execute(ctx)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
				reportRequests(b, loopRequests(bs.srv)-r0, b.N)
			})
		}
	}
}

// loopRequests counts the requests of a consume loop srv has served so
// far: pops, acks (single and batch) and lease renewals.
func loopRequests(srv *queentest.Server) int {
	return srv.Requests(queentest.RoutePop) + srv.Requests(queentest.RouteAck) +
		srv.Requests(queentest.RouteAckBatch) + srv.Requests(queentest.RouteRenew)
}

// reportRequests reports n requests for msgs messages as req/1000msg.
func reportRequests(b *testing.B, n, msgs int) {
	b.ReportMetric(1000*float64(n)/float64(max(msgs, 1)), "req/1000msg")
}

// BenchmarkConsumeBaseline is the bare net/http baseline alone.
func BenchmarkConsumeBaseline(b *testing.B) {
	for _, batch := range []int{100, 1} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			bs := newBenchSetup(b)
			q := bs.fill(b, "base", b.N)
			b.ReportAllocs()
			b.ResetTimer()
			bs.runBaseline(b, q, batch, b.N)
		})
	}
}

type benchSetup struct {
	srv    *queentest.Server
	client *queen.Client
	hc     *http.Client
	seq    int
}

func newBenchSetup(b *testing.B) *benchSetup {
	b.Helper()
	srv := queentest.Start(b)
	c, err := queen.New(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	b.Cleanup(func() {
		_ = c.Close(context.Background())
		tr.CloseIdleConnections()
	})
	return &benchSetup{srv: srv, client: c, hc: &http.Client{Transport: tr}}
}

// fill pushes n small messages to a new queue (one partition) and returns
// its name. Not timed.
func (bs *benchSetup) fill(b *testing.B, prefix string, n int) string {
	b.Helper()
	bs.seq++
	q := fmt.Sprintf("bench-%s-%d", prefix, bs.seq)
	ctx := context.Background()
	const chunk = 2000
	items := make([]any, 0, chunk)
	for i := 0; i < n; i++ {
		items = append(items, json.RawMessage(`{"id":`+strconv.Itoa(i)+`,"customer":"c-42","total":12.5}`))
		if len(items) == chunk || i == n-1 {
			if _, err := bs.client.Queue(q).Push(items...).Execute(ctx); err != nil {
				b.Fatal(err)
			}
			items = items[:0]
		}
	}
	return q
}

// fillParts pushes n small messages to a new queue, spread evenly over
// parts partitions, and returns its name. Not timed.
func (bs *benchSetup) fillParts(b *testing.B, prefix string, n, parts int) string {
	b.Helper()
	bs.seq++
	q := fmt.Sprintf("bench-%s-%d", prefix, bs.seq)
	ctx := context.Background()
	for p := range parts {
		k := n/parts + btoi(p < n%parts)
		items := make([]any, 0, min(k, 2000))
		for i := range k {
			items = append(items, json.RawMessage(`{"id":`+strconv.Itoa(i)+`,"customer":"c-42","total":12.5}`))
			if len(items) == cap(items) || i == k-1 {
				if _, err := bs.client.Queue(q).Partition("p" + strconv.Itoa(p)).Push(items...).Execute(ctx); err != nil {
					b.Fatal(err)
				}
				items = items[:0]
			}
		}
	}
	return q
}

// drop deletes the queues of a round (not timed), so that every round
// starts with the broker holding no earlier round's messages: the
// in-process broker's heap would else grow round after round, and with it
// the cost of every garbage collection in the process.
func (bs *benchSetup) drop(b *testing.B, queues ...string) {
	b.Helper()
	for _, q := range queues {
		if _, err := bs.client.Queue(q).Delete().Execute(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

var benchSink int

func (bs *benchSetup) runLoop(b *testing.B, queue string, batch, n int) {
	ctx := context.Background()
	err := bs.client.Queue(queue).Batch(batch).Partitions(1).Each().Limit(n).
		Consume(ctx, func(_ context.Context, m *queen.Message) error {
			benchSink += len(m.Raw)
			return nil
		}).Execute(ctx)
	if err != nil {
		b.Fatal(err)
	}
}

// The baseline's view of the wire: only what a hand-written loop needs.
type basePop struct {
	LeaseID  string `json:"leaseId"`
	Messages []struct {
		TransactionID string          `json:"transactionId"`
		PartitionID   string          `json:"partitionId"`
		LeaseID       string          `json:"leaseId"`
		Data          json.RawMessage `json:"data"`
	} `json:"messages"`
}

type baseAckItem struct {
	TransactionID string `json:"transactionId"`
	PartitionID   string `json:"partitionId"`
	LeaseID       string `json:"leaseId"`
	Status        string `json:"status"`
}

type baseAckBatch struct {
	Acknowledgments []baseAckItem `json:"acknowledgments"`
}

type baseAckResult struct {
	Success bool `json:"success"`
}

// runBaseline consumes n messages with bare net/http: the same pop query as
// the loop, one handler call per message, one ack per pop (the single ack
// route for one message, the batch route otherwise, as the client does).
func (bs *benchSetup) runBaseline(b *testing.B, queue string, batch, n int) {
	popURL := bs.srv.URL + "/api/v1/pop/queue/" + url.PathEscape(queue) +
		"?batch=" + strconv.Itoa(batch) + "&partitions=1&timeout=30000&wait=true"
	done := 0
	for done < n {
		resp, err := bs.hc.Get(popURL)
		if err != nil {
			b.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		if resp.StatusCode == http.StatusNoContent {
			continue
		}
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("pop: %d %s", resp.StatusCode, body)
		}
		var pr basePop
		if err := json.Unmarshal(body, &pr); err != nil {
			b.Fatal(err)
		}
		acks := make([]baseAckItem, len(pr.Messages))
		for i, m := range pr.Messages {
			benchSink += len(m.Data) // the handler
			acks[i] = baseAckItem{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: m.LeaseID, Status: "completed"}
		}
		var path string
		var payload []byte
		if len(acks) == 1 {
			path = "/api/v1/ack"
			payload, err = json.Marshal(acks[0])
		} else {
			path = "/api/v1/ack/batch"
			payload, err = json.Marshal(baseAckBatch{Acknowledgments: acks})
		}
		if err != nil {
			b.Fatal(err)
		}
		resp, err = bs.hc.Post(bs.srv.URL+path, "application/json", bytes.NewReader(payload))
		if err != nil {
			b.Fatal(err)
		}
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("ack: %v %d %s", err, resp.StatusCode, body)
		}
		var res []baseAckResult
		if err := json.Unmarshal(body, &res); err != nil || len(res) != len(acks) {
			b.Fatalf("ack answer %s: %v", body, err)
		}
		done += len(acks)
	}
}

// measure runs f and returns its wall time and heap allocations.
func measure(f func()) (time.Duration, uint64) {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	start := time.Now()
	f()
	d := time.Since(start)
	runtime.ReadMemStats(&m1)
	return d, m1.Mallocs - m0.Mallocs
}

func benchConsume(b *testing.B, batch int) {
	bs := newBenchSetup(b)
	// Many short rounds, alternating which side goes first, so that a
	// change of load on the machine hits both sides alike.
	rounds := min(20, max(1, b.N/(5*batch)))
	var loopT, baseT time.Duration
	var loopA, baseA uint64
	loopR := 0
	ratios := make([]float64, 0, rounds)
	b.ResetTimer()
	for i := range rounds {
		n := b.N/rounds + btoi(i < b.N%rounds)
		b.StopTimer()
		lq := bs.fill(b, "loop", n)
		bq := bs.fill(b, "base", n)
		b.StartTimer()
		var lt, bt time.Duration
		runBase := func() {
			d, a := measure(func() { bs.runBaseline(b, bq, batch, n) })
			bt = d
			baseA += a
		}
		runLoop := func() {
			r0 := loopRequests(bs.srv)
			d, a := measure(func() { bs.runLoop(b, lq, batch, n) })
			lt = d
			loopA += a
			loopR += loopRequests(bs.srv) - r0
		}
		if i%2 == 0 {
			runBase()
			runLoop()
		} else {
			runLoop()
			runBase()
		}
		loopT += lt
		baseT += bt
		ratios = append(ratios, bt.Seconds()/lt.Seconds())
		b.StopTimer()
		bs.drop(b, lq, bq)
		b.StartTimer()
	}
	b.StopTimer()
	msgs := float64(b.N)
	loopRate, baseRate := msgs/loopT.Seconds(), msgs/baseT.Seconds()
	b.ReportMetric(loopRate, "loop-msgs/s")
	b.ReportMetric(baseRate, "baseline-msgs/s")
	b.ReportMetric(median(ratios), "ratio")
	b.ReportMetric(loopRate/baseRate, "total-ratio")
	b.ReportMetric(float64(loopA)/msgs, "loop-allocs/msg")
	b.ReportMetric(float64(baseA)/msgs, "baseline-allocs/msg")
	reportRequests(b, loopR, b.N)
}

// median returns the middle value of xs (the mean of the middle two for
// an even count); xs is sorted in place.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// BenchmarkRequestOverhead is one empty, non-waiting pop (204) through the
// client next to the same request with bare net/http: the per-request cost
// of the client's HTTP layer, which dominates the loop with batch 1.
func BenchmarkRequestOverhead(b *testing.B) {
	bs := newBenchSetup(b)
	ctx := context.Background()
	qb := bs.client.Queue("empty").Batch(1).Partitions(1).Wait(false)
	b.Run("client", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if msgs, err := qb.Pop(ctx); err != nil || len(msgs) != 0 {
				b.Fatal(err, len(msgs))
			}
		}
	})
	u := bs.srv.URL + "/api/v1/pop/queue/empty?batch=1&partitions=1&wait=false"
	b.Run("net/http", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := bs.hc.Get(u)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				b.Fatal(resp.StatusCode)
			}
		}
	})
}
