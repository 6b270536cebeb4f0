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
