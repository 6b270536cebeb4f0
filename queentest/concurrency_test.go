package queentest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConcurrentClientsDeliverEachMessageOnce runs producers and consumers
// (queue mode and a consumer group, long polls, batch acks) at once; under
// -race it also checks the broker's locking. With leases far longer than the
// test, every message must be delivered exactly once per group.
func TestConcurrentClientsDeliverEachMessageOnce(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	configure(h, "q", item{"leaseTime": 300})
	const producers, perProducer, partitions = 4, 60, 6
	const total = producers * perProducer

	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perProducer; i += 3 {
				var items []item
				for j := i; j < i+3; j++ {
					id := p*perProducer + j
					items = append(items, item{"queue": "q", "partition": "p" + strconv.Itoa(id%partitions), "payload": item{"n": id}, "transactionId": "m" + strconv.Itoa(id)})
				}
				st, _, raw := h.do("POST", "/api/v1/push", item{"items": items})
				if st != http.StatusCreated {
					t.Errorf("push: %d %s", st, raw)
				}
			}
		}()
	}

	deadline := time.Now().Add(20 * time.Second) // a broken broker fails, never hangs
	consume := func(group string, workers int) map[int]int {
		var mu sync.Mutex
		seen := map[int]int{}
		var got atomic.Int64
		var cw sync.WaitGroup
		for w := 0; w < workers; w++ {
			cw.Add(1)
			go func() {
				defer cw.Done()
				for got.Load() < total && time.Now().Before(deadline) {
					q := vals("wait", "true", "timeout", "200", "batch", "7", "partitions", "2")
					if group != "" {
						q.Set("consumerGroup", group)
						q.Set("subscriptionMode", "all")
					}
					st, _, raw := h.do("GET", "/api/v1/pop/queue/q?"+q.Encode(), nil)
					if st == http.StatusNoContent {
						continue
					}
					if st != http.StatusOK {
						t.Errorf("pop: %d %s", st, raw)
						return
					}
					var p tPop
					if err := json.Unmarshal(raw, &p); err != nil {
						t.Error(err)
						return
					}
					var acks []item
					mu.Lock()
					for _, m := range p.Messages {
						var d struct{ N int }
						_ = json.Unmarshal(m.Data, &d)
						seen[d.N]++
						acks = append(acks, item{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID})
					}
					mu.Unlock()
					got.Add(int64(len(p.Messages)))
					body := item{"acknowledgments": acks}
					if group != "" {
						body["consumerGroup"] = group
					}
					st, _, raw = h.do("POST", "/api/v1/ack/batch", body)
					var res []tAck
					if st != http.StatusOK || json.Unmarshal(raw, &res) != nil {
						t.Errorf("ack: %d %s", st, raw)
						return
					}
					for _, r := range res {
						if !r.Success {
							t.Errorf("ack refused: %s", raw)
						}
					}
				}
			}()
		}
		cw.Wait()
		return seen
	}

	var queueMode, group map[int]int
	var cwg sync.WaitGroup
	cwg.Add(2)
	go func() { defer cwg.Done(); queueMode = consume("", 4) }()
	go func() { defer cwg.Done(); group = consume("g", 3) }()
	wg.Wait()
	cwg.Wait()

	for name, seen := range map[string]map[int]int{"queue mode": queueMode, "group": group} {
		require.Len(t, seen, total, name)
		for n, c := range seen {
			assert.Equal(t, 1, c, fmt.Sprintf("%s: message %d delivered %d times", name, n, c))
		}
	}
	assert.Equal(t, 0, s.LeasedCount("q", ""))
	assert.Equal(t, 0, s.LeasedCount("q", "g"))
}
