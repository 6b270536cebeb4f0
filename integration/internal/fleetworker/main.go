// Command fleetworker is one worker process of the fleet scenario
// (integration/fleet_test.go): a consume loop of one group whose handler
// takes a fixed time per message and fails the poison ones, and which logs
// what it does to an event log (package fleetlog) that survives SIGKILL:
// each handler's start and end, and each ack request before it is written
// and after its answer, seen through the client's http.RoundTripper.
//
// Messages are JSON objects {"g": n}; message n is poison when
// n % -poison-mod == -poison-rem. SIGTERM or SIGINT stops the loop; the
// process exits 0 once Execute has returned nil.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/integration/internal/fleetlog"
)

func main() { os.Exit(run()) }

func run() int {
	var (
		urls, queue, group, logPath string
		batch, concurrency, renewMs int
		poisonMod, poisonRem        int
		handle                      time.Duration
	)
	flag.StringVar(&urls, "url", os.Getenv("QUEEN_URL"), "broker URL (a comma list names the nodes of a cluster)")
	flag.StringVar(&queue, "queue", "", "queue to consume")
	flag.StringVar(&group, "group", "", "consumer group")
	flag.StringVar(&logPath, "log", "", "event log file (appended to)")
	flag.IntVar(&batch, "batch", 20, "messages per pop")
	flag.IntVar(&concurrency, "concurrency", 4, "handlers at once")
	flag.IntVar(&renewMs, "renew-ms", 0, "lease renewal interval in milliseconds (0: none)")
	flag.DurationVar(&handle, "handle", 15*time.Millisecond, "time the handler takes per message")
	flag.IntVar(&poisonMod, "poison-mod", 100, "message g is poison when g % poison-mod == poison-rem")
	flag.IntVar(&poisonRem, "poison-rem", 37, "see poison-mod")
	flag.Parse()
	if urls == "" || queue == "" || group == "" || logPath == "" || poisonMod < 1 {
		fmt.Fprintln(os.Stderr, "fleetworker: -url, -queue, -group and -log are required, -poison-mod at least 1")
		return 2
	}
	ev, err := fleetlog.Create(logPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetworker:", err)
		return 1
	}
	defer ev.Close()

	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 64
	nodes := strings.Split(urls, ",")
	opts := []queen.Option{
		queen.WithHTTPClient(&http.Client{Transport: &ackWatch{base: base, log: ev}}),
		queen.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
	}
	if len(nodes) > 1 {
		opts = append(opts, queen.WithURLs(nodes[1:]...))
	}
	c, err := queen.New(nodes[0], opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetworker:", err)
		return 2
	}
	defer c.Close(context.Background())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sig)
	go func() {
		select {
		case <-sig:
			ev.Write(fleetlog.Event{Ev: fleetlog.Signal})
			cancel()
		case <-ctx.Done():
		}
	}()

	handler := func(_ context.Context, m *queen.Message) error {
		g, ok := m.Data["g"].(float64)
		if !ok {
			return queen.Poison(fmt.Errorf("message %s has no number: %s", m.TransactionID, m.Raw))
		}
		n := int(g)
		ev.Write(fleetlog.Event{Ev: fleetlog.Start, P: m.PartitionID, T: m.TransactionID, G: n})
		time.Sleep(handle)
		poison := n%poisonMod == poisonRem
		ev.Write(fleetlog.Event{Ev: fleetlog.End, P: m.PartitionID, T: m.TransactionID, G: n, OK: !poison})
		if poison {
			return errors.New("poison")
		}
		return nil
	}
	qb := c.Queue(queue).Group(group).SubscriptionMode(queen.SubscriptionModeAll).Batch(batch).Concurrency(concurrency)
	if renewMs > 0 {
		qb = qb.RenewLease(true, renewMs)
	}
	err = qb.Consume(ctx, handler).Execute(ctx)
	exit := fleetlog.Event{Ev: fleetlog.Exit}
	if err != nil {
		exit.Err = err.Error()
	}
	ev.Write(exit)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetworker: Execute:", err)
		return 1
	}
	return 0
}

// ackWatch logs every ack request (POST .../ack and .../ack/batch) and
// lease renewal (POST .../lease/{id}/extend) before it is written and after
// its answer; other requests pass untouched.
type ackWatch struct {
	base http.RoundTripper
	log  *fleetlog.Writer
	seq  atomic.Int64
}

// RoundTrip implements http.RoundTripper.
func (w *ackWatch) RoundTrip(req *http.Request) (*http.Response, error) {
	p := req.URL.Path
	if req.Method == http.MethodPost && strings.Contains(p, "/lease/") && strings.HasSuffix(p, "/extend") {
		return w.renew(req)
	}
	if req.Method != http.MethodPost || !(strings.HasSuffix(p, "/ack") || strings.HasSuffix(p, "/ack/batch")) || req.Body == nil {
		return w.base.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	items, err := ackItems(body)
	if err != nil {
		return nil, fmt.Errorf("fleetworker: unreadable ack body %q: %w", body, err)
	}
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }

	r := w.seq.Add(1)
	w.log.Write(fleetlog.Event{Ev: fleetlog.Sent, R: r, Items: items})
	all := make([]int, len(items))
	for i := range all {
		all[i] = i
	}
	resp, err := w.base.RoundTrip(out)
	if err != nil {
		w.log.Write(fleetlog.Event{Ev: fleetlog.Done, R: r, Bad: all, Err: err.Error()})
		return nil, err
	}
	answer, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		w.log.Write(fleetlog.Event{Ev: fleetlog.Done, R: r, Code: resp.StatusCode, Bad: all, Err: err.Error()})
		return nil, err
	}
	w.log.Write(fleetlog.Event{Ev: fleetlog.Done, R: r, Code: resp.StatusCode, Bad: refused(resp.StatusCode, answer, all)})
	resp.Body = io.NopCloser(bytes.NewReader(answer))
	return resp, nil
}

// renew logs a lease renewal: a request the loop sends too, which a loop
// with one sender for acks and renewals has in flight instead of an ack.
func (w *ackWatch) renew(req *http.Request) (*http.Response, error) {
	r := w.seq.Add(1)
	w.log.Write(fleetlog.Event{Ev: fleetlog.Sent, R: r, Kind: fleetlog.Renew})
	resp, err := w.base.RoundTrip(req)
	if err != nil {
		w.log.Write(fleetlog.Event{Ev: fleetlog.Done, R: r, Kind: fleetlog.Renew, Err: err.Error()})
		return nil, err
	}
	w.log.Write(fleetlog.Event{Ev: fleetlog.Done, R: r, Kind: fleetlog.Renew, Code: resp.StatusCode})
	return resp, nil
}

// ackItems reads the acknowledgments of a batch ack body, or the one of a
// single ack body.
func ackItems(body []byte) ([]fleetlog.Item, error) {
	type item struct {
		TransactionID string `json:"transactionId"`
		PartitionID   string `json:"partitionId"`
		Status        string `json:"status"`
	}
	var doc struct {
		item
		Acknowledgments []item `json:"acknowledgments"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, err
	}
	list := doc.Acknowledgments
	if list == nil {
		list = []item{doc.item}
	}
	out := make([]fleetlog.Item, len(list))
	for i, it := range list {
		if it.TransactionID == "" || it.PartitionID == "" {
			return nil, errors.New("an acknowledgment without transactionId or partitionId")
		}
		out[i] = fleetlog.Item{P: it.PartitionID, T: it.TransactionID, S: it.Status}
	}
	return out, nil
}

// refused returns the positions the broker did not apply: those answered
// success false, or all of them unless the answer is a 2xx array of one
// result per acknowledgment.
func refused(code int, answer []byte, all []int) []int {
	var res []struct {
		Success bool `json:"success"`
	}
	if code/100 != 2 || json.Unmarshal(answer, &res) != nil || len(res) != len(all) {
		return all
	}
	var bad []int
	for i, r := range res {
		if !r.Success {
			bad = append(bad, i)
		}
	}
	return bad
}
