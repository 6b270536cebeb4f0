package main

import (
	"encoding/json"
	"strings"
	"testing"

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
