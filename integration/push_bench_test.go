//go:build unix

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/queen-go/queen"
)

// BenchmarkPush is M one-message pushes, one after another, through
// Push(...).Execute next to a bare loop that sends the same requests with
// net/http and encoding/json: per message one POST /api/v1/push whose body
// is built as the client builds it (the payload encoded to JSON on its own,
// a fresh UUIDv7 transaction id, queue and partition named), its answer
// read and its one result checked to be "queued".
//
// Each iteration is one round: both sides push M messages to a fresh queue
// of their own (created before and deleted after the round, neither timed),
// the bare loop first in even rounds and the client first in odd ones. The
// metrics are BenchmarkLimitRun's: ratio (the median of the rounds' bare
// time / client time), total-ratio, loop-s, bare-s, client-cpu-µs/msg,
// bare-cpu-µs/msg, cpu-ratio and load1. The CPU figures come from
// getrusage(RUSAGE_SELF), this process only: against a broker of its own
// (QUEEN_URL, a container) the client side alone; against queentest in
// process the in-process broker's work too, the same for both sides.
//
//	QUEEN_URL=http://127.0.0.1:6632 go -C integration test -run '^$' -bench 'Push$' -benchtime 5x -count 3 .
//
// QUEEN_BENCH_PUSH_MSGS sets M (default 500).
func BenchmarkPush(b *testing.B) {
	m := 500
	if v, err := strconv.Atoi(os.Getenv("QUEEN_BENCH_PUSH_MSGS")); err == nil && v > 0 {
		m = v
	}
	c := newBenchClient(b)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	b.Cleanup(hc.CloseIdleConnections)
	var rs rounds
	for b.Loop() {
		i := len(rs.client)
		lq := emptyBenchQueue(b, c, fmt.Sprintf("push-loop-%d", i))
		bq := emptyBenchQueue(b, c, fmt.Sprintf("push-bare-%d", i))
		client := func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			qb := c.Queue(lq).Partition("p0")
			for k := range m {
				res, err := qb.Push(map[string]any{"n": k}).Execute(ctx)
				if err != nil || len(res) != 1 || res[0].Status != queen.PushQueued {
					b.Fatalf("push %d: %v %+v", k, err, res)
				}
			}
		}
		bare := func() {
			for k := range m {
				if err := barePush(hc, be.url, bq, "p0", map[string]any{"n": k}); err != nil {
					b.Fatalf("bare push %d: %v", k, err)
				}
			}
		}
		rs.pair(b, client, bare)
		dropQueues(b, c, lq, bq)
	}
	rs.report(b, m)
}

// emptyBenchQueue creates an empty queue (not timed) and deletes it when
// the benchmark ends, if a round has not already.
func emptyBenchQueue(b *testing.B, c *queen.Client, base string) string {
	b.StopTimer()
	defer b.StartTimer()
	q := unique("bench-" + base)
	if _, err := c.Queue(q).Create().Execute(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = c.Queue(q).Delete().Execute(context.Background()) })
	return q
}

// barePushItem is one item of a push request, with the fields the client
// sends.
type barePushItem struct {
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition,omitempty"`
	Payload       json.RawMessage `json:"payload"`
	TransactionID string          `json:"transactionId,omitempty"`
}

// barePush pushes one payload with bare net/http, the request built as the
// client builds it, and checks that the broker queued it.
func barePush(hc *http.Client, base, q, partition string, payload any) error {
	raw, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return err
	}
	out, err := json.Marshal(struct {
		Items []barePushItem `json:"items"`
	}{[]barePushItem{{Queue: q, Partition: partition, Payload: raw, TransactionID: id.String()}}})
	if err != nil {
		return err
	}
	resp, err := hc.Post(base+"/api/v1/push", "application/json", bytes.NewReader(out))
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("push: %s: %s", resp.Status, body)
	}
	var res []struct {
		Index         int    `json:"index"`
		MessageID     string `json:"message_id"`
		TransactionID string `json:"transaction_id"`
		QueueName     string `json:"queueName"`
		Status        string `json:"status"`
		Offset        *int64 `json:"offset"`
		PartitionID   string `json:"partition_id"`
		Error         string `json:"error"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		return fmt.Errorf("push answer %s: %v", body, err)
	}
	if len(res) != 1 || res[0].Status != "queued" {
		return fmt.Errorf("push answer %s: not queued", body)
	}
	return nil
}
