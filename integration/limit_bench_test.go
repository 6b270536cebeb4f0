//go:build unix

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/queen-go/queen"
)

// BenchmarkLimitRun is the workload of issue 11's Limit end game: N
// messages over 10 partitions, consumed by Concurrency(4), Batch(100),
// Limit(N), in each of the loop's modes, next to a bare loop that does the
// same with net/http and encoding/json (4 goroutines, each popping up to
// 100 messages of any partition and acking each pop in one batch ack,
// until N are acked).
//
// Each iteration is one round: both sides get a fresh queue of N messages
// (filled and, after the round, deleted, neither timed), then each consumes
// its queue, the bare loop first in even rounds and the client first in odd
// ones, so that a change of load on the machine hits both alike. The
// benchmark reports:
//
//	ratio              the median of the rounds' bare time / client time
//	                   (1.0: as fast as the bare loop)
//	total-ratio        the same over the totals of all rounds
//	loop-s, bare-s     seconds a run, averaged
//	client-cpu-µs/msg  CPU time (user + system) of this process while the
//	bare-cpu-µs/msg    client, or the bare loop, ran, per message
//	cpu-ratio          the median of the rounds' client CPU / bare CPU
//	load1              the one-minute load average, mean of the rounds'
//	                   starts (0 where /proc/loadavg is missing)
//
// and logs each round: both sides' wall and CPU time, pops (empty ones,
// waiting ones, time in pops summed over the goroutines) and acks (count,
// time summed), to tell a gap the broker made (slower answers while one
// side ran) from one the client made (more CPU, more or waiting pops).
//
// The CPU figures come from getrusage(RUSAGE_SELF): they count this
// process only. Against a broker of its own (QUEEN_URL, a container) that
// is the client side alone, the broker's work being in another process;
// against queentest in process they include the in-process broker's work,
// the same for both sides.
//
// It runs against the integration backend, a real broker included:
//
//	QUEEN_URL=http://127.0.0.1:6632 QUEEN_BENCH_MSGS=5000 go -C integration test -run '^$' -bench LimitRun -benchtime 5x -count 3 .
//
// QUEEN_BENCH_MSGS sets N (default 2000). The shape can change too:
// QUEEN_BENCH_PARTS the partitions (default 10), QUEEN_BENCH_CONC the
// client's Concurrency and the bare loop's goroutines (default 4), and
// QUEEN_BENCH_BATCH the batch of both (default 100).
func BenchmarkLimitRun(b *testing.B) {
	n := envInt("QUEEN_BENCH_MSGS", 2000)
	sh := benchShape{parts: envInt("QUEEN_BENCH_PARTS", 10), conc: envInt("QUEEN_BENCH_CONC", 4), batch: envInt("QUEEN_BENCH_BATCH", 100)}
	modes := []struct {
		name string
		run  func(ctx context.Context, qb *queen.QueueBuilder, count *atomic.Int64) error
	}{
		{"Each", func(ctx context.Context, qb *queen.QueueBuilder, count *atomic.Int64) error {
			return qb.Each().ConsumeBatch(ctx, func(_ context.Context, ms []*queen.Message) error {
				count.Add(int64(len(ms)))
				return nil
			}).Execute(ctx)
		}},
		{"Consume", func(ctx context.Context, qb *queen.QueueBuilder, count *atomic.Int64) error {
			return qb.Consume(ctx, func(context.Context, *queen.Message) error {
				count.Add(1)
				return nil
			}).Execute(ctx)
		}},
		{"ConsumeBatch", func(ctx context.Context, qb *queen.QueueBuilder, count *atomic.Int64) error {
			return qb.ConsumeBatch(ctx, func(_ context.Context, ms []*queen.Message) error {
				count.Add(int64(len(ms)))
				return nil
			}).Execute(ctx)
		}},
	}
	for _, mode := range modes {
		b.Run(mode.name, func(b *testing.B) {
			var cp popCount
			c := newBenchClient(b, queen.WithHooks(&cp))
			var rs rounds
			for b.Loop() {
				i := len(rs.client)
				lq := benchQueue(b, c, fmt.Sprintf("loop-%s-%d", mode.name, i), n, sh.parts)
				bq := benchQueue(b, c, fmt.Sprintf("bare-%s-%d", mode.name, i), n, sh.parts)
				client := func() {
					var got atomic.Int64
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
					defer cancel()
					err := mode.run(ctx, c.Queue(lq).Batch(sh.batch).Concurrency(sh.conc).Limit(n), &got)
					if err != nil || got.Load() != int64(n) {
						b.Fatalf("loop: %v, %d of %d messages", err, got.Load(), n)
					}
				}
				var bp popCount
				bare := func() { bareConsume(b, be.url, bq, n, sh, &bp) }
				cp = popCount{}
				rs.pair(b, client, bare)
				b.Logf("round %d: client %v (cpu %v, %s), bare %v (cpu %v, %s)", i,
					rs.client[i].wall.Round(time.Millisecond), rs.client[i].cpu.Round(time.Millisecond), &cp,
					rs.bare[i].wall.Round(time.Millisecond), rs.bare[i].cpu.Round(time.Millisecond), &bp)
				dropQueues(b, c, lq, bq)
			}
			rs.report(b, n)
		})
	}
}

// rounds holds the paired measurements of a benchmark: one sample of each
// side per round.
type rounds struct {
	client, bare []sample
	load         []float64
}

// sample is one side's run: its wall time and this process's CPU time
// (user + system) while it ran.
type sample struct {
	wall, cpu time.Duration
}

// pair runs one round: client and bare, in an order that alternates from
// round to round, each measured on its own.
func (rs *rounds) pair(b *testing.B, client, bare func()) {
	if l, ok := loadAvg(); ok {
		rs.load = append(rs.load, l)
	}
	var cs, bs sample
	if len(rs.client)%2 == 0 {
		bs = measureRun(b, bare)
		cs = measureRun(b, client)
	} else {
		cs = measureRun(b, client)
		bs = measureRun(b, bare)
	}
	rs.client = append(rs.client, cs)
	rs.bare = append(rs.bare, bs)
}

// report reports the rounds' metrics (see BenchmarkLimitRun); msgs is the
// number of messages each side handled in a round.
func (rs *rounds) report(b *testing.B, msgs int) {
	b.StopTimer()
	k := len(rs.client)
	if k == 0 {
		return
	}
	ratios := make([]float64, k)
	cpuRatios := make([]float64, k)
	var cw, bw, cc, bc time.Duration
	for i := range k {
		c, r := rs.client[i], rs.bare[i]
		ratios[i] = r.wall.Seconds() / c.wall.Seconds()
		cpuRatios[i] = c.cpu.Seconds() / r.cpu.Seconds()
		cw += c.wall
		bw += r.wall
		cc += c.cpu
		bc += r.cpu
	}
	total := float64(k * msgs)
	b.ReportMetric(median(ratios), "ratio")
	b.ReportMetric(bw.Seconds()/cw.Seconds(), "total-ratio")
	b.ReportMetric(cw.Seconds()/float64(k), "loop-s")
	b.ReportMetric(bw.Seconds()/float64(k), "bare-s")
	b.ReportMetric(float64(cc.Microseconds())/total, "client-cpu-µs/msg")
	b.ReportMetric(float64(bc.Microseconds())/total, "bare-cpu-µs/msg")
	b.ReportMetric(median(cpuRatios), "cpu-ratio")
	var load float64
	for _, l := range rs.load {
		load += l
	}
	if len(rs.load) > 0 {
		load /= float64(len(rs.load))
	}
	b.ReportMetric(load, "load1")
	b.ReportMetric(0, "ns/op")
}

// measureRun runs f after a garbage collection (so that the garbage of the
// untimed set-up is not charged to f) and returns its wall time and this
// process's CPU time meanwhile. getrusage(RUSAGE_SELF) counts this process
// only: a broker of its own (QUEEN_URL, a container) runs in another
// process and is not in the figure; queentest in process is.
func measureRun(b *testing.B, f func()) sample {
	b.Helper()
	runtime.GC()
	c0 := cpuTime(b)
	t0 := time.Now()
	f()
	wall := time.Since(t0)
	return sample{wall: wall, cpu: cpuTime(b) - c0}
}

// cpuTime is this process's user + system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAvg reads the one-minute load average of the machine.
func loadAvg() (float64, bool) {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return v, err == nil
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

// dropQueues deletes a round's queues (not timed), so that no round runs
// against a broker that holds the earlier rounds' messages.
func dropQueues(b *testing.B, c *queen.Client, qs ...string) {
	b.StopTimer()
	defer b.StartTimer()
	for _, q := range qs {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := c.Queue(q).Delete().Execute(ctx)
		cancel()
		if err != nil {
			b.Fatalf("delete queue %s: %v", q, err)
		}
	}
}

// popCount counts the pops of one side of a round: the client's through
// its PopHook, the bare loop's by hand. It explains a gap in wall time that
// CPU time does not: pops that came back empty, or waited at the broker.
type popCount struct {
	pops, empty, waited atomic.Int64
	inPop               atomic.Int64 // nanoseconds, summed over the pops
	acks, inAck         atomic.Int64 // ack requests, and their nanoseconds summed
}

// OnRequest implements queen.RequestHook: it counts the ack requests.
func (p *popCount) OnRequest(_ context.Context, e queen.RequestEvent) {
	if strings.HasPrefix(e.Route, "/api/v1/ack") {
		p.acked(e.Duration)
	}
}

func (p *popCount) acked(d time.Duration) {
	p.acks.Add(1)
	p.inAck.Add(int64(d))
}

// OnPop implements queen.PopHook.
func (p *popCount) OnPop(_ context.Context, e queen.PopEvent) {
	p.add(len(e.Messages), e.Wait > 0, e.Duration)
}

func (p *popCount) add(msgs int, waited bool, d time.Duration) {
	p.pops.Add(1)
	if msgs == 0 {
		p.empty.Add(1)
	}
	if waited {
		p.waited.Add(1)
	}
	p.inPop.Add(int64(d))
}

func (p *popCount) String() string {
	return fmt.Sprintf("%d pops, %d empty, %d waiting, %v in pops; %d acks, %v in acks", p.pops.Load(), p.empty.Load(), p.waited.Load(),
		time.Duration(p.inPop.Load()).Round(time.Millisecond), p.acks.Load(), time.Duration(p.inAck.Load()).Round(time.Millisecond))
}

func newBenchClient(b *testing.B, opts ...queen.Option) *queen.Client {
	c, err := queen.New(be.url, append([]queen.Option{queen.WithIdleConns(16)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// benchShape is the shape of a LimitRun: partitions, the client's
// Concurrency (the bare loop's goroutines), and the batch of both.
type benchShape struct{ parts, conc, batch int }

// benchQueue makes a queue of n messages over parts partitions and
// deletes it when the benchmark ends.
func benchQueue(b *testing.B, c *queen.Client, base string, n, parts int) string {
	b.StopTimer()
	defer b.StartTimer()
	ctx := context.Background()
	q := unique("bench-" + base)
	lease := time.Minute
	if _, err := c.Queue(q).Config(queen.QueueConfig{LeaseTime: &lease}).Create().Execute(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = c.Queue(q).Delete().Execute(context.Background()) })
	per := n / parts
	for p := range parts {
		k := per
		if p == parts-1 {
			k = n - (parts-1)*per
		}
		payloads := make([]any, k)
		for i := range payloads {
			payloads[i] = map[string]any{"n": i}
		}
		for start := 0; start < k; start += 500 {
			end := min(start+500, k)
			if _, err := c.Queue(q).Partition(fmt.Sprintf("p%d", p)).Push(payloads[start:end]...).Execute(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	return q
}

// bareConsume is the baseline: sh.conc goroutines pop (up to sh.batch,
// any partition, no long poll) and ack each pop in one batch ack, until n
// messages are acked.
func bareConsume(b *testing.B, base, q string, n int, sh benchShape, pc *popCount) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: max(16, sh.conc)}}
	defer hc.CloseIdleConnections()
	var acked atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, sh.conc)
	for range sh.conc {
		wg.Go(func() {
			for acked.Load() < int64(n) {
				left := int64(n) - acked.Load()
				if err := barePopAck(hc, base, q, min(sh.batch, int(left)), &acked, pc); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

type barePop struct {
	LeaseID  *string `json:"leaseId"`
	Messages []struct {
		TransactionID string `json:"transactionId"`
		PartitionID   string `json:"partitionId"`
		LeaseID       string `json:"leaseId"`
	} `json:"messages"`
}

type bareAck struct {
	TransactionID string `json:"transactionId"`
	PartitionID   string `json:"partitionId"`
	LeaseID       string `json:"leaseId"`
	Status        string `json:"status"`
}

func barePopAck(hc *http.Client, base, q string, batch int, acked *atomic.Int64, pc *popCount) error {
	began := time.Now()
	resp, err := hc.Get(base + "/api/v1/pop/queue/" + url.PathEscape(q) + "?wait=false&batch=" + strconv.Itoa(batch))
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	var p barePop
	decodeErr := json.Unmarshal(body, &p)
	pc.add(len(p.Messages), false, time.Since(began))
	if resp.StatusCode == http.StatusNoContent || len(body) == 0 || decodeErr != nil || len(p.Messages) == 0 {
		time.Sleep(2 * time.Millisecond) // every partition leased or empty
		return nil
	}
	acks := make([]bareAck, len(p.Messages))
	for i, m := range p.Messages {
		acks[i] = bareAck{TransactionID: m.TransactionID, PartitionID: m.PartitionID, LeaseID: m.LeaseID, Status: "completed"}
	}
	out, _ := json.Marshal(map[string]any{"acknowledgments": acks})
	ackBegan := time.Now()
	defer func() { pc.acked(time.Since(ackBegan)) }()
	resp, err = hc.Post(base+"/api/v1/ack/batch", "application/json", bytes.NewReader(out))
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ack: %s", resp.Status)
	}
	acked.Add(int64(len(acks)))
	return nil
}
