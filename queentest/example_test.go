package queentest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/queen-go/queen/queentest"
)

// The broker speaks plain HTTP: any client, in any language, can use it.
// Here, raw net/http: push two messages, pop them as a consumer group, ack
// them in one batch, and move a FakeClock to show a lease expiring.
func Example() {
	clock := queentest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	srv := queentest.NewServer(queentest.WithClock(clock))
	defer srv.Close()

	post := func(path string, body any) []byte {
		b, _ := json.Marshal(body)
		resp, err := http.Post(srv.URL+path, "application/json", bytes.NewReader(b))
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return out
	}
	type message struct {
		TransactionID   string          `json:"transactionId"`
		PartitionID     string          `json:"partitionId"`
		LeaseID         string          `json:"leaseId"`
		Data            json.RawMessage `json:"data"`
		DeliveryAttempt int             `json:"deliveryAttempt"`
	}
	pop := func() (int, []message) {
		resp, err := http.Get(srv.URL + "/api/v1/pop/queue/orders?consumerGroup=billing&subscriptionMode=all&batch=10")
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		var body struct{ Messages []message }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.Messages
	}

	post("/api/v1/push", map[string]any{"items": []map[string]any{
		{"queue": "orders", "partition": "customer-42", "payload": map[string]int{"total": 10}},
		{"queue": "orders", "partition": "customer-42", "payload": map[string]int{"total": 20}},
	}})

	status, msgs := pop()
	fmt.Println("pop:", status, len(msgs), "messages")
	for _, m := range msgs {
		fmt.Println(" ", string(m.Data), "attempt", m.DeliveryAttempt)
	}

	// The lease (60 s for a queue created by a push) runs out: redelivered.
	clock.Advance(61 * time.Second)
	status, msgs = pop()
	fmt.Println("after expiry:", status, "attempt", msgs[0].DeliveryAttempt)

	var acks []map[string]string
	for _, m := range msgs {
		acks = append(acks, map[string]string{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": "completed"})
	}
	var results []struct {
		Success       bool `json:"success"`
		LeaseReleased bool `json:"leaseReleased"`
	}
	_ = json.Unmarshal(post("/api/v1/ack/batch", map[string]any{"consumerGroup": "billing", "acknowledgments": acks}), &results)
	fmt.Println("acked:", results[1].Success, "lease released:", results[1].LeaseReleased)

	status, _ = pop()
	fmt.Println("then:", status)
	fmt.Println("pop requests:", srv.Requests(queentest.RoutePop))

	// Output:
	// pop: 200 2 messages
	//   {"total":10} attempt 1
	//   {"total":20} attempt 1
	// after expiry: 200 attempt 2
	// acked: true lease released: true
	// then: 204
	// pop requests: 3
}

// Restart crashes the broker and starts it again, keeping what the real
// broker of its profile stores: a test can check that a worker rides out a
// restart. On the 2.x profile a group read through pinned pops in mode new
// loses the start its first pop gave the partition (the broker kept it in
// memory only), and what was pushed meanwhile is never read by it; a group
// whose pops carry a fixed start time reads it.
func ExampleServer_Restart() {
	clock := queentest.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	srv := queentest.NewServer(queentest.WithClock(clock))
	defer srv.Close()

	// pop reads partition p of orders as a group, waiting out the restart.
	pop := func(query string) int {
		for {
			resp, err := http.Get(srv.URL + "/api/v1/pop/queue/orders/partition/p?wait=false&" + query)
			if err != nil {
				time.Sleep(10 * time.Millisecond) // the broker is down: try again
				continue
			}
			var body struct{ Messages []json.RawMessage }
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			return len(body.Messages)
		}
	}
	const newMode = "consumerGroup=live&subscriptionMode=new"
	const fixedTime = "consumerGroup=audit&subscriptionFrom=2026-01-01T00:00:01Z" // the time of its first pop
	push := func() {
		resp, err := http.Post(srv.URL+"/api/v1/push", "application/json",
			strings.NewReader(`{"items":[{"queue":"orders","partition":"p","payload":{"total":10}}]}`))
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
	}

	push()
	clock.Advance(time.Second)
	fmt.Println("first pops:", pop(newMode), pop(fixedTime))
	clock.Advance(time.Second)
	push() // after both groups' first pop

	srv.Restart(0)
	fmt.Println("mode new after the restart:", pop(newMode))
	fmt.Println("fixed start time after the restart:", pop(fixedTime))

	// Output:
	// first pops: 0 0
	// mode new after the restart: 0
	// fixed start time after the restart: 1
}
