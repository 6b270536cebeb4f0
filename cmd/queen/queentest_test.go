package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// A script's session against the in-memory broker: push, read by offset,
// consume with a group, rewind the group, read again.
func TestScriptAgainstQueentest(t *testing.T) {
	srv := queentest.Start(t)
	env := map[string]string{"QUEEN_URL": srv.URL}
	sh := func(code int, stdin string, args ...string) result {
		t.Helper()
		return runEnv(t, env, stdin, args...).want(t, code)
	}

	r := sh(exitOK, "{\"n\":1}\n{\"n\":2}\n", "push", "orders", "--partition", "customer-42")
	if strings.Count(r.stdout, "queued\t") != 2 {
		t.Fatalf("push: %q", r.stdout)
	}
	r = sh(exitOK, "", "fetch", "orders", "customer-42")
	if r.stdout != "customer-42\t0\t{\"n\":1}\ncustomer-42\t1\t{\"n\":2}\n" {
		t.Fatalf("fetch: %q", r.stdout)
	}
	r = sh(exitOK, "", "pop", "orders", "--group", "audit", "--subscription-mode", "all", "--batch", "10", "--ack")
	if strings.Count(r.stdout, "\n") != 2 {
		t.Fatalf("pop: %q", r.stdout)
	}
	r = sh(exitOK, "", "pop", "orders", "--group", "audit")
	if r.stdout != "" {
		t.Fatalf("pop after ack: %q", r.stdout)
	}
	r = sh(exitOK, "", "groups")
	if !strings.Contains(r.stdout, "audit") || !strings.Contains(r.stdout, "orders") {
		t.Fatalf("groups: %q", r.stdout)
	}
	r = sh(exitOK, "", "seek", "audit", "orders", "--time", "2000-01-01T00:00:00Z")
	if !strings.Contains(r.stdout, "1 partitions moved to 2000-01-01T00:00:00Z") {
		t.Fatalf("seek: %q", r.stdout)
	}
	r = sh(exitOK, "", "--json", "pop", "orders", "--group", "audit", "--batch", "10")
	var msgs []struct {
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &msgs); err != nil || len(msgs) != 2 {
		t.Fatalf("pop after seek: %q (%v)", r.stdout, err)
	}
	r = sh(exitOK, "", "dlq", "orders")
	if r.stdout != "ID  PARTITION  GROUP  FAILED_AT  RETRIES  ERROR  PAYLOAD\ntotal 0\n" { // the header and the total
		t.Fatalf("dlq: %q", r.stdout)
	}
	r = sh(exitFail, "", "seek", "audit", "nope", "--to-end")
	if !strings.Contains(r.stderr, `group "audit" has no position on queue "nope"`) || !strings.Contains(r.stderr, "--create") {
		t.Fatalf("seek of a queue the group does not read: %q", r.stderr)
	}
	r = sh(exitFail, "", "seek", "audit", "nope", "--to-end", "--create")
	if !strings.Contains(r.stderr, "404") {
		t.Fatalf("seek of a missing queue: %q", r.stderr)
	}
}

// Against the 0.15.1 profile (which answers as a real 0.15.1 broker does):
// a partition seek reports the one cursor it moved to the end, a partition
// seek to a time is refused with what the broker did instead, and deleting
// a queue that does not exist says nothing was deleted, in JSON too (the
// broker answers deleted:true, existed:false there).
func TestScriptAgainstQueentest015(t *testing.T) {
	srv := queentest.Start(t, queentest.WithProfile(queentest.Profile015))
	env := map[string]string{"QUEEN_URL": srv.URL}
	sh := func(code int, stdin string, args ...string) result {
		t.Helper()
		return runEnv(t, env, stdin, args...).want(t, code)
	}
	sh(exitOK, "{\"n\":1}\n{\"n\":2}\n", "push", "orders", "--partition", "p1")
	sh(exitOK, "", "pop", "orders", "--group", "audit", "--partition", "p1", "--subscription-mode", "all", "--batch", "1", "--ack")
	r := sh(exitOK, "", "seek", "audit", "orders", "--partition", "p1", "--to-end")
	if r.stdout != "audit on orders/p1: 1 partitions moved to the end\n" {
		t.Fatalf("partition seek: %q", r.stdout)
	}
	r = sh(exitFail, "", "seek", "audit", "orders", "--partition", "p1", "--time", "1h")
	if !strings.Contains(r.stderr, "not supported") || !strings.Contains(r.stderr, "nothing sent") {
		t.Fatalf("partition seek to a time: %q", r.stderr)
	}
	r = sh(exitOK, "", "queues", "delete", "nope")
	if r.stdout != "no queue nope: nothing deleted\n" {
		t.Fatalf("delete of a missing queue: %q", r.stdout)
	}
	r = sh(exitOK, "", "--json", "queues", "delete", "nope")
	var del struct{ Deleted, Existed *bool }
	if err := json.Unmarshal([]byte(r.stdout), &del); err != nil || del.Deleted == nil || *del.Deleted || del.Existed == nil || *del.Existed {
		t.Fatalf("--json delete of a missing queue: %q (%v)", r.stdout, err)
	}
}

// shellOK runs the command against the broker at url (QUEEN_URL), no
// stdin, and wants exit status 0.
func shellOK(t *testing.T, url string) func(args ...string) result {
	env := map[string]string{"QUEEN_URL": url}
	return func(args ...string) result {
		t.Helper()
		return runEnv(t, env, "", args...).want(t, exitOK)
	}
}

// pop tells on stderr what stdout cannot: an empty queue (exit 0, nothing
// on stdout), and messages left leased without --ack, with when the lease
// ends (the pop's time plus the queue's lease time; a 0.15.1 broker does
// not report the lease time, and the line says so). With --ack, nothing.
func TestPopSaysEmptyAndLeased(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			srv := queentest.Start(t, queentest.WithProfile(p))
			sh := shellOK(t, srv.URL)
			r := sh("pop", "orders", "--group", "billing")
			if r.stdout != "" || r.stderr != "queen pop: no messages in orders for group billing\n" {
				t.Fatalf("empty pop: stdout %q stderr %q", r.stdout, r.stderr)
			}
			if p == queentest.Profile2x {
				sh("queues", "create", "orders", "--lease-time", "90s")
			}
			sh("push", "orders", `{"n":1}`, `{"n":2}`)
			before := time.Now().Truncate(time.Second)
			r = sh("pop", "orders", "--batch", "10")
			after := time.Now()
			if strings.Count(r.stdout, "\n") != 2 || !strings.Contains(r.stderr, "queen pop: 2 messages left leased (lease ") {
				t.Fatalf("pop without --ack: stdout %q stderr %q", r.stdout, r.stderr)
			}
			if p == queentest.Profile2x {
				_, rest, ok := strings.Cut(r.stderr, "until about ")
				end, err := time.Parse(time.RFC3339, strings.Fields(rest + " ")[0])
				if !ok || err != nil || end.Before(before.Add(90*time.Second)) || end.After(after.Add(90*time.Second)) || !strings.Contains(r.stderr, "(lease time 1m30s)") {
					t.Fatalf("the lease's end: stderr %q (%v), want the pop's time + 90s", r.stderr, err)
				}
			} else if !strings.Contains(r.stderr, "does not report it") {
				t.Fatalf("0.15.1: stderr %q, want it to say the lease time is not reported", r.stderr)
			}
			sh("push", "orders", `{"n":3}`)
			r = sh("pop", "orders", "--group", "g", "--subscription-mode", "all", "--batch", "10", "--ack")
			if strings.Count(r.stdout, "\n") != 3 || r.stderr != "" {
				t.Fatalf("pop --ack: stdout %q stderr %q, want nothing on stderr", r.stdout, r.stderr)
			}
		})
	}
}

// dlq --all prints every dead letter, page after page, as a table ending
// "total N" or as one JSON value {messages, total}, on both profiles (0.15.1
// sends its whole list at once); an empty queue is {"messages": [], "total": 0}.
func TestDLQAll(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			srv := queentest.Start(t, queentest.WithProfile(p))
			sh := shellOK(t, srv.URL)
			sh("push", "emails", `{"n":1}`, `{"n":2}`, `{"n":3}`, `{"n":4}`, `{"n":5}`)
			c, err := queen.New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(t.Context())
			msgs, err := c.Queue("emails").Batch(5).Pop(t.Context())
			if err != nil || len(msgs) != 5 {
				t.Fatalf("pop: %d, %v", len(msgs), err)
			}
			var acks []queen.Settlement
			for _, m := range msgs {
				acks = append(acks, queen.Settlement{Message: m, Status: queen.StatusDLQ, Error: "bounced"})
			}
			if _, err := c.SettleBatch(t.Context(), acks, queen.AckOptions{}); err != nil {
				t.Fatal(err)
			}
			srv.ResetCounters()
			r := sh("dlq", "emails", "--all", "--limit", "2")
			if strings.Count(r.stdout, "bounced") != 5 || !strings.HasSuffix(r.stdout, "\ntotal 5\n") {
				t.Fatalf("dlq --all: %q", r.stdout)
			}
			want := 3 // pages of 2
			if p == queentest.Profile015 {
				want = 1
			}
			if n := srv.Requests(queentest.RouteDLQ); n != want {
				t.Errorf("%d DLQ requests, want %d", n, want)
			}
			r = sh("--json", "dlq", "emails", "--all", "--limit", "2")
			var all struct {
				Messages []struct {
					Error   string          `json:"error"`
					Payload json.RawMessage `json:"payload"`
				} `json:"messages"`
				Total int `json:"total"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &all); err != nil || len(all.Messages) != 5 || all.Total != 5 || all.Messages[0].Error != "bounced" {
				t.Fatalf("--json dlq --all: %q (%v)", r.stdout, err)
			}
			r = sh("--json", "dlq", "nothing-here", "--all")
			if err := json.Unmarshal([]byte(r.stdout), &all); err != nil || len(all.Messages) != 0 || all.Total != 0 || !strings.Contains(r.stdout, `"messages": []`) {
				t.Fatalf("--json dlq --all of an empty queue: %q (%v)", r.stdout, err)
			}
		})
	}
}
