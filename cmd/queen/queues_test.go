package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// queues list, show, create, configure and delete, in text and JSON, on
// both broker profiles.
func TestQueuesCommands(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			srv := queentest.Start(t, queentest.WithProfile(p))
			env := map[string]string{"QUEEN_URL": srv.URL}
			sh := func(code int, args ...string) result {
				t.Helper()
				return runEnv(t, env, "", args...).want(t, code)
			}
			r := sh(exitOK, "queues", "create", "orders", "--lease-time", "2m", "--retry-limit", "5", "--dead-letter-queue")
			if !strings.HasPrefix(r.stdout, "created orders: ") || !strings.Contains(r.stdout, "leaseTime=120") ||
				!strings.Contains(r.stdout, "retryLimit=5") || !strings.Contains(r.stdout, "deadLetterQueue=true") {
				t.Fatalf("create: %q", r.stdout)
			}
			sh(exitOK, "push", "orders", "--partition", "p1", `{"n":1}`, `{"n":2}`)

			r = sh(exitOK, "queues")
			if !strings.HasPrefix(r.stdout, "QUEUE ") || !strings.Contains(r.stdout, "\norders ") {
				t.Fatalf("list: %q", r.stdout)
			}
			var list []struct {
				Name       string         `json:"name"`
				Partitions int            `json:"partitions"`
				Messages   map[string]int `json:"messages"`
				Config     map[string]any `json:"config"`
			}
			if err := json.Unmarshal([]byte(sh(exitOK, "--json", "queues", "list").stdout), &list); err != nil || len(list) != 1 ||
				list[0].Name != "orders" || list[0].Messages["total"] != 2 || list[0].Config == nil {
				t.Fatalf("list --json: %+v (%v)", list, err)
			}

			r = sh(exitOK, "queues", "orders")
			if !strings.HasPrefix(r.stdout, "PARTITION ") || !strings.Contains(r.stdout, "\np1 ") {
				t.Fatalf("show: %q", r.stdout)
			}
			var detail struct {
				Name          string `json:"name"`
				PartitionList []struct {
					Name     string         `json:"name"`
					Messages map[string]int `json:"messages"`
				} `json:"partitionList"`
			}
			if err := json.Unmarshal([]byte(sh(exitOK, "--json", "queues", "show", "orders").stdout), &detail); err != nil ||
				detail.Name != "orders" || len(detail.PartitionList) == 0 {
				t.Fatalf("show --json: %+v (%v)", detail, err)
			}
			r = sh(exitFail, "queues", "show", "nope")
			if !strings.Contains(r.stderr, "queue not found") {
				t.Fatalf("show of a missing queue: %q", r.stderr)
			}

			var conf struct {
				Queue  string         `json:"queue"`
				Config map[string]any `json:"config"`
			}
			r = sh(exitOK, "--json", "queues", "configure", "orders", "--retry-delay", "2s")
			if err := json.Unmarshal([]byte(r.stdout), &conf); err != nil || conf.Queue != "orders" || conf.Config["retryDelay"] != float64(2000) {
				t.Fatalf("configure --json: %+v (%v)", conf, err)
			}
			// A merge keeps the lease time on 2.x; 0.15.1 always replaces.
			wantLease := map[queentest.Profile]float64{queentest.Profile2x: 120, queentest.Profile015: 300}[p]
			if conf.Config["leaseTime"] != wantLease {
				t.Fatalf("leaseTime after configure = %v, want %v", conf.Config["leaseTime"], wantLease)
			}

			var del struct {
				Queue   string `json:"queue"`
				Deleted bool   `json:"deleted"`
				Existed bool   `json:"existed"`
			}
			if err := json.Unmarshal([]byte(sh(exitOK, "--json", "queues", "delete", "orders").stdout), &del); err != nil || !del.Deleted || !del.Existed {
				t.Fatalf("delete --json: %+v (%v)", del, err)
			}
			if r = sh(exitOK, "queues", "delete", "orders"); r.stdout != "no queue orders: nothing deleted\n" {
				t.Fatalf("delete again: %q", r.stdout)
			}
			if r = sh(exitOK, "queues"); strings.Contains(r.stdout, "orders") {
				t.Fatalf("list after delete: %q", r.stdout)
			}
		})
	}
}

// Bad queue command lines send nothing.
func TestQueuesUsage(t *testing.T) {
	b := newFakeBroker(t, func(brokerReq) (int, string) { return 200, `{}` })
	for _, args := range [][]string{
		{"queues", "configure", "q"},                     // no option
		{"queues", "delete"},                             // no queue
		{"queues", "list", "--retry-limit", "3"},         // an option without create/configure
		{"queues", "create", "q", "--replace"},           // --replace without configure
		{"queues", "create", "q", "--lease-time", "-1s"}, // negative
		{"queues", "create", "q", "--retry-limit", "many"},
		{"queues", "show", "a", "b"},
	} {
		r := runCLI(t, b, "", args...)
		if r.code != exitUsage {
			t.Errorf("%q: exit %d (%s)", args, r.code, r.stderr)
		}
	}
	if n := len(b.requests()); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

// dlq on a 0.15.1 broker: the address in the first column, the total and
// the rows not shown; a replay and a delete by that address, and a purge
// that is not supported.
func TestDLQOn015(t *testing.T) {
	srv := queentest.Start(t, queentest.Broker015())
	env := map[string]string{"QUEEN_URL": srv.URL}
	sh := func(code int, args ...string) result {
		t.Helper()
		return runEnv(t, env, "", args...).want(t, code)
	}
	sh(exitOK, "push", "mail", "--partition", "p", `{"n":1}`, `{"n":2}`, `{"n":3}`)
	c, err := queen.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for range 3 {
		msgs, err := c.Queue("mail").Group("g").SubscriptionMode(queen.SubscriptionModeAll).Batch(1).Wait(false).Pop(t.Context())
		if err != nil || len(msgs) != 1 {
			t.Fatalf("pop: %v %v", msgs, err)
		}
		if _, err := c.Transaction().Ack(msgs[0], "dlq", queen.AckOptions{ConsumerGroup: "g", Error: "bad"}).Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	r := sh(exitOK, "dlq", "mail", "--limit", "1")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ADDRESS ") || strings.HasPrefix(lines[1], "- ") ||
		lines[2] != "total 3; showing 1-1; more with --offset 1 (and --limit)" {
		t.Fatalf("dlq --limit 1:\n%s", r.stdout)
	}
	r = sh(exitOK, "dlq", "mail", "--offset", "2")
	if !strings.HasSuffix(r.stdout, "\ntotal 3; showing 3-3\n") || strings.Count(r.stdout, "\n") != 3 {
		t.Fatalf("dlq --offset 2:\n%s", r.stdout)
	}
	r = sh(exitOK, "dlq", "mail")
	if !strings.HasSuffix(r.stdout, "\ntotal 3\n") || strings.Count(r.stdout, "\n") != 5 {
		t.Fatalf("dlq:\n%s", r.stdout)
	}
	var page struct {
		Total    int `json:"total"`
		Messages []struct {
			ID            string `json:"id"`
			MessageID     string `json:"messageId"`
			PartitionID   string `json:"partitionId"`
			TransactionID string `json:"transactionId"`
		} `json:"messages"`
	}
	if err := json.Unmarshal([]byte(sh(exitOK, "--json", "dlq", "mail").stdout), &page); err != nil || page.Total != 3 ||
		page.Messages[0].ID != "" || page.Messages[0].MessageID == "" {
		t.Fatalf("dlq --json: %+v (%v)", page, err)
	}
	addr := func(i int) string { return page.Messages[i].PartitionID + "/" + page.Messages[i].TransactionID }
	if !strings.Contains(r.stdout, addr(0)+" ") {
		t.Fatalf("dlq: no address %s in\n%s", addr(0), r.stdout)
	}
	r = sh(exitOK, "dlq", "replay", addr(0))
	if r.stdout != "moved\t"+addr(0)+"\tmail/p\t-1\n" || srv.DLQCount("mail") != 2 {
		t.Fatalf("replay: %q, %d letters left", r.stdout, srv.DLQCount("mail"))
	}
	r = sh(exitOK, "dlq", "replay", addr(0))
	if r.stdout != "duplicate\t"+addr(0)+"\tmail/p\t-1\n" {
		t.Fatalf("second replay: %q", r.stdout)
	}
	r = sh(exitOK, "dlq", "delete", addr(1), addr(1))
	if r.stdout != "deleted\t"+addr(1)+"\ngone\t"+addr(1)+"\n" || srv.DLQCount("mail") != 1 {
		t.Fatalf("delete: %q, %d letters left", r.stdout, srv.DLQCount("mail"))
	}
	r = sh(exitFail, "dlq", "purge", "mail")
	if !strings.Contains(r.stderr, "not supported by this broker") || strings.Contains(r.stderr, "<html>") || srv.DLQCount("mail") != 1 {
		t.Fatalf("purge: %q", r.stderr)
	}
}

// The 2.x dlq says when it printed fewer rows than there are.
func TestDLQSaysWhatItLeftOut(t *testing.T) {
	b := newFakeBroker(t, func(brokerReq) (int, string) {
		return 200, `{"messages":[{"id":"row-1","queue":"emails","partition":"p1","transactionId":"tx","payload":1,"retryCount":0,"failedAt":"2026-10-02T10:00:00Z"}],"total":250,"pagination":{"limit":1,"offset":100}}`
	})
	r := runCLI(t, b, "", "dlq", "emails", "--limit", "1", "--offset", "100").want(t, exitOK)
	if !strings.HasSuffix(r.stdout, "\ntotal 250; showing 101-101; more with --offset 101 (and --limit)\n") {
		t.Fatalf("stdout:\n%s", r.stdout)
	}
}

// Every queue-option flag reaches its QueueConfig field and the wire, each
// time in the broker's unit (rounded up): one create with all of them.
func TestQueueOptionFlagsReachTheWire(t *testing.T) {
	b := newFakeBroker(t, func(brokerReq) (int, string) {
		return 200, `{"configured":true,"queue":"q","options":{}}`
	})
	args := []string{"queues", "create", "q"}
	want := map[string]any{}
	for _, o := range queueOptions {
		switch {
		case o.dur != nil:
			args = append(args, "--"+o.flag, "90s")
			want[o.name] = 90.0
			if o.ms {
				want[o.name] = 90000.0
			}
		case o.num != nil:
			args = append(args, "--"+o.flag, "7")
			want[o.name] = 7.0
		default:
			args = append(args, "--"+o.flag+"=true")
			want[o.name] = true
		}
	}
	r := runCLI(t, b, "", args...)
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	reqs := b.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	var body struct {
		Options map[string]any `json:"options"`
	}
	if err := json.Unmarshal([]byte(reqs[0].Body), &body); err != nil {
		t.Fatal(err)
	}
	for name, v := range want {
		if body.Options[name] != v {
			t.Errorf("option %s = %v on the wire, want %v", name, body.Options[name], v)
		}
	}
	if len(body.Options) != len(want) {
		t.Errorf("options on the wire %v, want exactly %v", body.Options, want)
	}
}
