package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// dlq replay QUEUE --all replays every dead letter, oldest first, and a
// second run finds none, on both generations; dlq purge empties a 2.x
// dead-letter queue.
func TestDLQReplayAll(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			srv := queentest.Start(t, queentest.WithProfile(p))
			env := map[string]string{"QUEEN_URL": srv.URL}
			sh := func(code int, args ...string) result {
				t.Helper()
				return runEnv(t, env, "", args...).want(t, code)
			}
			c, err := queen.New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			for i := range 4 {
				if _, err := c.Queue("mail").Partition("p").Push(queen.Item{Payload: i, TransactionID: "mail-" + string(rune('a'+i))}).Execute(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			deadLetterAllCLI(t, c, "mail", "g")

			r := sh(exitOK, "dlq", "replay", "mail", "--all")
			want := "moved\tmail-a\tmail/p\t"
			lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
			if len(lines) != 5 || !strings.HasPrefix(lines[0], want) || !strings.HasPrefix(lines[3], "moved\tmail-d\t") ||
				lines[4] != "moved 4, kept 0, duplicate 0, gone 0; 4 letters removed" || srv.DLQCount("mail") != 0 {
				t.Fatalf("replay --all:\n%s(%d letters left)", r.stdout, srv.DLQCount("mail"))
			}
			r = sh(exitOK, "--json", "dlq", "replay", "mail", "--all")
			var rep queen.ReplayReport
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Results) != 0 || rep.Moved != 0 {
				t.Fatalf("second replay --all: %q (%v)", r.stdout, err)
			}

			deadLetterAllCLI(t, c, "mail", "g") // the four copies
			r = runEnv(t, env, "", "dlq", "purge", "mail", "--group", "g")
			if p == queentest.Profile015 {
				if r.code != exitFail || !strings.Contains(r.stderr, "not supported by this broker") {
					t.Fatalf("purge on 0.15.1: exit %d, %q", r.code, r.stderr)
				}
				return
			}
			if r.code != exitOK || r.stdout != "purged 4 dead letters of mail\n" || srv.DLQCount("mail") != 0 {
				t.Fatalf("purge: exit %d, %q %q", r.code, r.stdout, r.stderr)
			}
		})
	}
}

// deadLetterAllCLI makes group dead-letter every message of queue it can
// read now.
func deadLetterAllCLI(t *testing.T, c *queen.Client, queue, group string) {
	t.Helper()
	msgs, err := c.Queue(queue).Group(group).SubscriptionMode(queen.SubscriptionModeAll).Batch(100).Wait(false).Pop(t.Context())
	if err != nil || len(msgs) == 0 {
		t.Fatalf("pop: %d messages, %v", len(msgs), err)
	}
	acks := make([]queen.Settlement, len(msgs))
	for i, m := range msgs {
		acks[i] = queen.Settlement{Message: m, Status: queen.StatusDLQ, Error: "bounced"}
	}
	if _, err := c.SettleBatch(t.Context(), acks, queen.AckOptions{ConsumerGroup: group}); err != nil {
		t.Fatal(err)
	}
}
