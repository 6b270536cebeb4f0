package queen_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// deadLetterN pushes n messages {"i": 0..n-1} to queue/partition and
// dead-letters them in one settle, so that they fail at one instant: the
// broker's order among them is its own.
func deadLetterN(t *testing.T, c *queen.Client, queue, partition string, n int) {
	t.Helper()
	payloads := make([]any, n)
	for i := range payloads {
		payloads[i] = map[string]int{"i": i}
	}
	if _, err := c.Queue(queue).Partition(partition).Push(payloads...).Execute(t.Context()); err != nil {
		t.Fatal(err)
	}
	msgs, err := c.Queue(queue).Partition(partition).Batch(n).Wait(false).Pop(t.Context())
	if err != nil || len(msgs) != n {
		t.Fatalf("pop: %d messages, %v", len(msgs), err)
	}
	acks := make([]queen.Settlement, n)
	for i, m := range msgs {
		acks[i] = queen.Settlement{Message: m, Status: queen.StatusDLQ, Error: "boom"}
	}
	if _, err := c.SettleBatch(t.Context(), acks, queen.AckOptions{}); err != nil {
		t.Fatal(err)
	}
}

// DeadLetters yields every dead letter once, page after page, and asks
// for no page after the broker's last: on 2.x, 250 rows in pages of 100
// are three requests; on 0.15.1 (no paging) one request, whatever the
// page size. Breaking out of the loop asks for nothing more.
func TestDeadLettersAllPages(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			srv, c := newBroker(t, queentest.WithProfile(p))
			deadLetterN(t, c, "mail", "a", 150)
			deadLetterN(t, c, "mail", "b", 100)
			srv.ResetCounters()
			seen := map[string]int{}
			n := 0
			for dl, err := range c.Admin().DeadLetters(t.Context(), "mail", queen.DLQListOptions{}) {
				if err != nil {
					t.Fatal(err)
				}
				var v struct{ I int }
				if err := json.Unmarshal(dl.Payload, &v); err != nil {
					t.Fatal(err)
				}
				seen[dl.Partition+"/"+strconv.Itoa(v.I)]++
				n++
			}
			if n != 250 || len(seen) != 250 {
				t.Fatalf("yielded %d rows, %d distinct, want 250 once each", n, len(seen))
			}
			want := 3
			if p == queentest.Profile015 {
				want = 1
			}
			if got := srv.Requests(queentest.RouteDLQ); got != want {
				t.Errorf("%d DLQ requests, want %d", got, want)
			}

			srv.ResetCounters()
			n = 0
			for _, err := range c.Admin().DeadLetters(t.Context(), "mail", queen.DLQListOptions{Limit: 10, Offset: 245}) {
				if err != nil {
					t.Fatal(err)
				}
				n++
			}
			if n != 5 {
				t.Errorf("from offset 245: %d rows, want 5", n)
			}
			srv.ResetCounters()
			for range c.Admin().DeadLetters(t.Context(), "mail", queen.DLQListOptions{Limit: 10}) {
				break
			}
			if got := srv.Requests(queentest.RouteDLQ); got != 1 {
				t.Errorf("a loop that broke at its first row made %d requests, want 1", got)
			}
		})
	}
}

// dlqRow is one row of a stubbed 2.x DLQ answer.
func dlqRow(i int, partition string) map[string]any {
	return map[string]any{"id": fmt.Sprintf("row-%d", i), "queue": "mail", "partition": partition, "transactionId": fmt.Sprintf("tx-%d", i),
		"payload": map[string]int{"i": i}, "errorMessage": "boom", "failedAt": "2026-10-02T10:00:00.000000Z"}
}

// A 2.x broker that ignores the partition filter and caps the page at 2
// rows: pages the client's filter empties or shortens do not end the
// sequence, the broker's Total does; without a Total, a short page does.
func TestDeadLettersEndsOnTheBrokersRows(t *testing.T) {
	parts := []string{"p2", "p2", "p1", "p2", "p2", "p1", "p2"} // rows 0..6, newest first
	for _, withTotal := range []bool{true, false} {
		t.Run(fmt.Sprint("total=", withTotal), func(t *testing.T) {
			stub, c := newWireStubFunc(t, func(r stubReq) (int, string) {
				off, _ := strconv.Atoi(r.Query.Get("offset"))
				rows := []any{}
				for i := off; i < len(parts) && i < off+2; i++ {
					rows = append(rows, dlqRow(i, parts[i]))
				}
				page := map[string]any{"messages": rows, "pagination": map[string]int{"limit": 2, "offset": off}}
				if withTotal {
					page["total"] = len(parts)
				}
				b, _ := json.Marshal(page)
				return 200, string(b)
			})
			var got []string
			for dl, err := range c.Admin().DeadLetters(t.Context(), "mail", queen.DLQListOptions{Partition: "p1", Limit: 2}) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, dl.ID)
			}
			if fmt.Sprint(got) != "[row-2 row-5]" {
				t.Errorf("yielded %v, want [row-2 row-5] (p1's rows on pages 2 and 3)", got)
			}
			if n := len(stub.requests()); n != 4 {
				t.Errorf("%d requests, want 4 (offsets 0, 2, 4, 6: the last page has one row)", n)
			}
		})
	}
	// A page size above the broker's cap: with a Total, the capped pages do
	// not end it.
	stub, c := newWireStubFunc(t, func(r stubReq) (int, string) {
		off, _ := strconv.Atoi(r.Query.Get("offset"))
		rows := []any{}
		for i := off; i < 5 && i < off+2; i++ {
			rows = append(rows, dlqRow(i, "p1"))
		}
		b, _ := json.Marshal(map[string]any{"messages": rows, "total": 5, "pagination": map[string]int{"limit": 2, "offset": off}})
		return 200, string(b)
	})
	n := 0
	for _, err := range c.Admin().DeadLetters(t.Context(), "mail", queen.DLQListOptions{Limit: 50}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 5 || len(stub.requests()) != 3 {
		t.Errorf("%d rows in %d requests, want 5 in 3", n, len(stub.requests()))
	}
}

// Bad options are yielded once as an error, before any request; a page
// that fails is yielded once and ends the sequence.
func TestDeadLettersErrors(t *testing.T) {
	stub, c := newWireStub(t, 500, `{"error":"db down"}`)
	for _, opts := range []queen.DLQListOptions{{Limit: -1}, {From: time.Unix(10, 0), To: time.Unix(5, 0)}} {
		n := 0
		for _, err := range c.Admin().DeadLetters(t.Context(), "mail", opts) {
			n++
			if !errors.Is(err, queen.ErrInvalidArgument) {
				t.Errorf("%+v: %v, want ErrInvalidArgument", opts, err)
			}
		}
		if n != 1 {
			t.Errorf("%+v: %d values, want the one error", opts, n)
		}
	}
	if len(stub.requests()) != 0 {
		t.Fatalf("bad options sent %d requests", len(stub.requests()))
	}
	n := 0
	for _, err := range c.Admin().DeadLetters(t.Context(), "mail", queen.DLQListOptions{}) {
		n++
		if be, ok := errors.AsType[*queen.BrokerError](err); !ok || be.Status != 500 {
			t.Errorf("failed page: %v, want the broker's 500", err)
		}
	}
	if n != 1 {
		t.Errorf("failed page: %d values, want the one error", n)
	}
}
