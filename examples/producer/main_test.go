package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The demo run on the in-process broker: every request is answered 201 and
// the service stops cleanly.
func TestRunDemo(t *testing.T) {
	t.Setenv("QUEEN_URL", "")
	var out bytes.Buffer
	if err := run(context.Background(), config{addr: "127.0.0.1:0", queue: "events", demo: 1000}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "demo: 1000 of 1000 events stored") || !strings.Contains(out.String(), "stopped;") {
		t.Fatalf("output:\n%s", out.String())
	}
}

// The handler: concurrent requests each get their own stored message, a
// body that is not JSON is a 400, and a closed producer a 503. The broker
// holds each accepted event once, in order per user.
func TestHandler(t *testing.T) {
	srv := queentest.Start(t)
	client, err := queen.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	events, err := client.Queue("events").Producer()
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(handler{events: events})
	defer hs.Close()

	// 32 clients, 8 per user: a user's partition has several events
	// waiting at once, which go out together.
	const clients, users, each = 32, 4, 20
	var wg sync.WaitGroup
	ids := make(chan string, clients*each)
	for g := range clients {
		wg.Go(func() {
			for i := range each {
				body := `{"client":` + strconv.Itoa(g) + `,"i":` + strconv.Itoa(i) + `}`
				resp, err := http.Post(hs.URL+"?user=u"+strconv.Itoa(g%users), "application/json", strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				var got map[string]string
				_ = json.NewDecoder(resp.Body).Decode(&got)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated || got["status"] != "queued" || got["messageId"] == "" {
					t.Errorf("HTTP %d %v", resp.StatusCode, got)
					return
				}
				ids <- got["messageId"]
			}
		})
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		seen[id] = true
	}
	if len(seen) != clients*each {
		t.Fatalf("%d distinct message ids for %d requests", len(seen), clients*each)
	}
	if n := srv.Requests(queentest.RoutePush); n > clients*each/2 {
		t.Fatalf("%d push requests for %d events: not batched", n, clients*each)
	}

	resp, err := http.Post(hs.URL, "application/json", strings.NewReader(`{not json`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad JSON: HTTP %d", resp.StatusCode)
	}

	if err := events.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp, err = http.Post(hs.URL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("closed producer: HTTP %d", resp.StatusCode)
	}

	// Every event stored once, each client's in order (in its user's
	// partition).
	last := map[int]int{}
	total := 0
	for {
		msgs, err := client.Queue("events").Batch(1000).Partitions(64).Wait(false).CommitOnDelivery(true).Pop(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			var e struct{ Client, I int }
			if err := json.Unmarshal(m.Raw, &e); err != nil {
				t.Fatal(err)
			}
			if m.Partition != "u"+strconv.Itoa(e.Client%users) {
				t.Fatalf("client %d's event in partition %s", e.Client, m.Partition)
			}
			if prev, ok := last[e.Client]; (ok && e.I != prev+1) || (!ok && e.I != 0) {
				t.Fatalf("client %d: event %d after %d", e.Client, e.I, prev)
			}
			last[e.Client] = e.I
			total++
		}
	}
	if total != clients*each {
		t.Fatalf("%d events stored, want %d", total, clients*each)
	}
}
