package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// lag prints each partition's pending messages, the one the group never
// read included; --wait returns once the group drained the queue, and
// --timeout gives up before.
func TestLag(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			srv := queentest.Start(t, queentest.WithProfile(p))
			env := map[string]string{"QUEEN_URL": srv.URL}
			sh := func(code int, args ...string) result {
				t.Helper()
				return runEnv(t, env, "", args...).want(t, code)
			}
			sh(exitOK, "push", "orders", "--partition", "a", "1", "2")
			sh(exitOK, "push", "orders", "--partition", "b", "3")
			sh(exitOK, "pop", "orders", "--group", "g", "--partition", "a", "--subscription-mode", "all", "--batch", "1", "--ack")

			r := sh(exitOK, "lag", "orders", "--group", "g")
			note := ""
			if p == queentest.Profile015 {
				note = " (estimated: no position there)"
			}
			if want := "PARTITION  PENDING\na          1\nb          1" + note + "\npending 2\n"; r.stdout != want {
				t.Fatalf("lag:\n%s\nwant\n%s", r.stdout, want)
			}
			var l queen.GroupLag
			if err := json.Unmarshal([]byte(sh(exitOK, "--json", "lag", "orders", "--group", "g").stdout), &l); err != nil ||
				l.Pending != 2 || len(l.Partitions) != 2 || l.Group != "g" {
				t.Fatalf("lag --json: %+v (%v)", l, err)
			}
			r = sh(exitFail, "lag", "orders", "--group", "g", "--wait", "--interval", "10ms", "--timeout", "50ms")
			if !strings.Contains(r.stderr, `group "g" not drained on orders (2 pending at the last look)`) {
				t.Fatalf("lag --wait --timeout: %q", r.stderr)
			}

			c, err := queen.New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			for range 2 {
				msgs, err := c.Queue("orders").Group("g").Batch(10).Wait(false).Pop(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range msgs {
					if _, err := c.Ack(t.Context(), m, true, queen.AckOptions{ConsumerGroup: "g"}); err != nil {
						t.Fatal(err)
					}
				}
			}
			r = sh(exitOK, "lag", "orders", "--group", "g", "--wait", "--interval", "10ms")
			if !strings.HasSuffix(r.stdout, "\npending 0: drained\n") {
				t.Fatalf("lag --wait:\n%s", r.stdout)
			}
		})
	}
}
