package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// --time takes a duration meaning that long ago, as well as RFC 3339.
func TestSeekRelativeTime(t *testing.T) {
	for _, tt := range []struct {
		arg string
		ago time.Duration
	}{{"1h", time.Hour}, {"30m", 30 * time.Minute}, {"90s", 90 * time.Second}, {"1h30m", 90 * time.Minute}} {
		b := seekBroker(t, 200, `{"consumerGroup":"g","partitionsUpdated":1,"queueName":"q","seekToEnd":false,"success":true,"targetTimestamp":"2026-10-22T00:00:00Z"}`, "q")
		before := time.Now()
		runCLI(t, b, "", "seek", "g", "q", "--time", tt.arg).want(t, exitOK)
		after := time.Now()
		var body struct{ Timestamp time.Time }
		if err := json.Unmarshal([]byte(seekRequest(t, b).Body), &body); err != nil {
			t.Fatal(err)
		}
		if body.Timestamp.Before(before.Add(-tt.ago).Add(-time.Millisecond)) || body.Timestamp.After(after.Add(-tt.ago)) {
			t.Errorf("--time %s sent %v, want %v ago (now %v)", tt.arg, body.Timestamp, tt.ago, before)
		}
	}
}

// A --time the CLI cannot read is a usage error that names the flag and
// the value as typed; nothing is sent.
func TestSeekTimeErrorsNameTheFlag(t *testing.T) {
	b := seekBroker(t, 200, seekAnswer, "q")
	for _, v := range []string{"yesterday", "-1h", "2026-10-22", "1 h"} {
		r := runCLI(t, b, "", "seek", "g", "q", "--time", v).want(t, exitUsage)
		if !strings.Contains(r.stderr, `--time "`+v+`"`) || strings.Contains(r.stderr, "Timestamp") {
			t.Errorf("--time %q: stderr %q; want it to name --time and the value, not the Go field", v, r.stderr)
		}
	}
	if n := len(b.requests()); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

// Seeking a group that has no position on the queue (a typo) is refused
// and creates nothing, unless --create is given.
func TestSeekRefusesUnknownGroupUnlessCreate(t *testing.T) {
	srv := queentest.Start(t)
	env := map[string]string{"QUEEN_URL": srv.URL}
	runEnv(t, env, "", "push", "orders", "{}").want(t, exitOK)
	runEnv(t, env, "", "pop", "orders", "--group", "billing", "--subscription-mode", "all").want(t, exitOK)

	r := runEnv(t, env, "", "seek", "nosuchgroup", "orders", "--to-end").want(t, exitFail)
	if !strings.Contains(r.stderr, `group "nosuchgroup" has no position on queue "orders"`) || !strings.Contains(r.stderr, "--create") || r.stdout != "" {
		t.Fatalf("stderr %q stdout %q", r.stderr, r.stdout)
	}
	groups := func() []string {
		var rows []struct{ Name, Queue string }
		r := runEnv(t, env, "", "--json", "groups").want(t, exitOK)
		if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, g := range rows {
			names = append(names, g.Name+"@"+g.Queue)
		}
		slices.Sort(names)
		return names
	}
	if got := groups(); !slices.Equal(got, []string{"billing@orders"}) {
		t.Fatalf("groups after the refused seek = %v", got)
	}
	// A group known on another queue only is refused there too.
	runEnv(t, env, "", "push", "audit", "{}").want(t, exitOK)
	runEnv(t, env, "", "seek", "billing", "audit", "--to-end").want(t, exitFail)

	runEnv(t, env, "", "seek", "billing", "orders", "--time", "1h").want(t, exitOK)
	runEnv(t, env, "", "seek", "nosuchgroup", "orders", "--to-end", "--create").want(t, exitOK)
	if got := groups(); !slices.Equal(got, []string{"billing@orders", "nosuchgroup@orders"}) {
		t.Fatalf("groups after seek --create = %v", got)
	}
}

// With neither --url nor QUEEN_URL the CLI says on stderr which broker it
// talks to; with either it says nothing.
func TestDefaultURLIsAnnounced(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no request gets out: the notice is all this test is about
	runIn := func(env map[string]string, args ...string) string {
		var out, errb strings.Builder
		run(ctx, args, strings.NewReader(""), &out, &errb, func(k string) string { return env[k] })
		return errb.String()
	}
	notice := "no --url or QUEEN_URL given; using http://localhost:6632"
	if s := runIn(nil, "health"); !strings.Contains(s, notice) {
		t.Fatalf("stderr %q, want the notice", s)
	}
	if s := runIn(map[string]string{"QUEEN_URL": "http://127.0.0.1:1"}, "health"); strings.Contains(s, "using") {
		t.Fatalf("with QUEEN_URL: stderr %q", s)
	}
	if s := runIn(nil, "--url", "http://127.0.0.1:1", "health"); strings.Contains(s, "using") {
		t.Fatalf("with --url: stderr %q", s)
	}
	if s := runIn(nil, "health", "--url", "http://127.0.0.1:1"); strings.Contains(s, "using") {
		t.Fatalf("with --url after the command: stderr %q", s)
	}
	if s := runIn(nil, "seek", "g"); strings.Contains(s, "using") {
		t.Fatalf("a usage error connects to nothing: stderr %q", s)
	}
}

// keysOf returns the sorted keys of a JSON object.
func keysOf(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %s", raw)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// jsonFields lists, for each --json output, the fields always present and
// those present when known (the package documentation lists the same).
var jsonFields = map[string]struct{ always, optional []string }{
	"push": {[]string{"index", "status", "transactionId", "queue", "offset"}, []string{"messageId", "partitionId", "error"}},
	"pop": {[]string{"queue", "partition", "partitionId", "transactionId", "payload"},
		[]string{"leaseId", "consumerGroup", "offset", "deliveryAttempt", "createdAt"}},
	"fetch partition": {[]string{"records", "highWatermark", "logStartOffset"}, []string{"error"}},
	"fetch record":    {[]string{"partition", "offset", "transactionId", "payload"}, []string{"timestamp"}},
	"groups": {[]string{"name", "queue", "partitionCursors", "partitionsWithLag", "totalLag", "maxTimeLag", "state", "conflation"},
		[]string{"subscriptionMode", "subscriptionTimestamp", "subscriptionCreatedAt", "storage", "kind"}},
	"groups GROUP":           {[]string{"name", "queues"}, nil},
	"groups GROUP queue":     {[]string{"conflation", "partitions"}, []string{"kind"}},
	"groups GROUP partition": {[]string{"partition", "totalConsumed", "offsetLag", "timeLag", "leaseActive"}, []string{"workerId", "lastConsumedAt"}},
	"groups delete":          {[]string{"consumerGroup", "deletedPartitions", "metadataDeleted"}, []string{"queue", "queues"}},
	"seek":                   {[]string{"consumerGroup", "queue", "toEnd", "partitionsUpdated"}, []string{"partition", "timestamp"}},
	"dlq":                    {[]string{"messages", "total", "limit", "offset"}, nil},
	"dlq message": {[]string{"id", "queue", "offset", "transactionId", "payload", "retryCount"},
		[]string{"partition", "partitionId", "consumerGroup", "messageId", "error", "failedAt", "messageCreatedAt", "producerSub"}},
	"dlq replay":       {[]string{"moved", "result", "removed", "offset"}, []string{"queue", "partition", "transactionId", "messageId", "originalTransactionId"}},
	"dlq replay --all": {[]string{"results", "moved", "kept", "duplicate", "removed", "gone"}, nil},
	"dlq delete":       {[]string{"address", "removed"}, nil},
	"dlq purge":        {[]string{"queue", "deleted"}, nil},
	"lag":              {[]string{"queue", "group", "pending", "partitions"}, nil},
	"lag partition":    {[]string{"partition", "pending"}, []string{"estimated"}},
	"health": {[]string{"healthy", "status", "httpStatus"}, []string{"engine", "version", "database", "server", "workerId", "workerStatus",
		"sharedState", "raft"}},
	"queues": {[]string{"name", "partitions", "messages", "config"}, []string{"id", "namespace", "task", "retainedBytes", "createdAt"}},
	"queues QUEUE": {[]string{"name", "partitions", "messages", "config", "partitionList"},
		[]string{"id", "namespace", "task", "retainedBytes", "createdAt"}},
	"queues QUEUE partition": {[]string{"name", "messages"}, []string{"id", "createdAt", "lastActivity", "oldestMessage", "newestMessage"}},
	"queues create":          {[]string{"queue", "config"}, nil},
	"queues delete":          {[]string{"queue", "deleted", "existed"}, nil},
}

// Every command prints JSON with --json, with the field names the package
// documentation lists. A renamed or new field fails here.
func TestJSONFieldNamesOfEveryCommand(t *testing.T) {
	srv := queentest.Start(t)
	env := map[string]string{"QUEEN_URL": srv.URL}
	js := func(args ...string) json.RawMessage {
		t.Helper()
		r := runEnv(t, env, "", append([]string{"--json"}, args...)...).want(t, exitOK)
		if !json.Valid([]byte(r.stdout)) {
			t.Fatalf("%q: stdout is not JSON: %q", args, r.stdout)
		}
		return json.RawMessage(r.stdout)
	}
	first := func(raw json.RawMessage) json.RawMessage {
		t.Helper()
		var rows []json.RawMessage
		if err := json.Unmarshal(raw, &rows); err != nil || len(rows) == 0 {
			t.Fatalf("want a non-empty array: %s", raw)
		}
		return rows[0]
	}
	seen := map[string]bool{}
	want := func(what string, raw json.RawMessage) {
		t.Helper()
		spec, ok := jsonFields[what]
		if !ok {
			t.Fatalf("no fields listed for %s", what)
		}
		seen[what] = true
		got := keysOf(t, raw)
		for _, k := range spec.always {
			if !slices.Contains(got, k) {
				t.Errorf("%s: field %q missing from %s", what, k, raw)
			}
		}
		for _, k := range got {
			if !slices.Contains(spec.always, k) && !slices.Contains(spec.optional, k) {
				t.Errorf("%s: field %q is not documented", what, k)
			}
		}
	}

	want("push", first(js("push", "orders", "--partition", "p", `{"n":1}`, `{"n":2}`, `{"n":3}`)))
	want("pop", first(js("pop", "orders", "--group", "g", "--subscription-mode", "all", "--batch", "1", "--ack")))
	var fetched map[string]json.RawMessage
	if err := json.Unmarshal(js("fetch", "orders", "p"), &fetched); err != nil {
		t.Fatal(err)
	}
	want("fetch partition", fetched["p"])
	var part struct{ Records []json.RawMessage }
	_ = json.Unmarshal(fetched["p"], &part)
	want("fetch record", part.Records[0])
	want("groups", first(js("groups")))
	detail := js("groups", "g")
	want("groups GROUP", detail)
	var d struct{ Queues map[string]json.RawMessage }
	_ = json.Unmarshal(detail, &d)
	want("groups GROUP queue", d.Queues["orders"])
	var gq struct{ Partitions []json.RawMessage }
	_ = json.Unmarshal(d.Queues["orders"], &gq)
	want("groups GROUP partition", gq.Partitions[0])
	want("seek", js("seek", "g", "orders", "--time", "2000-01-01T00:00:00Z"))

	// A dead letter, for dlq and dlq replay.
	ctx := context.Background()
	c, err := queen.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	msgs, err := c.Queue("orders").Group("d").SubscriptionMode(queen.SubscriptionModeAll).Batch(1).Wait(false).Pop(ctx)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("pop: %v %v", msgs, err)
	}
	if _, err := c.Settle(ctx, msgs[0], queen.StatusDLQ, queen.AckOptions{ConsumerGroup: "d", Error: "bad"}); err != nil {
		t.Fatal(err)
	}
	page := js("dlq", "orders")
	want("dlq", page)
	var p struct{ Messages []json.RawMessage }
	_ = json.Unmarshal(page, &p)
	want("dlq message", p.Messages[0])
	var dl struct{ ID string }
	_ = json.Unmarshal(p.Messages[0], &dl)
	want("dlq replay", first(js("dlq", "replay", dl.ID)))
	deadLetterNext := func() {
		t.Helper()
		msgs, err := c.Queue("orders").Group("d").Batch(1).Wait(false).Pop(ctx)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("pop: %v %v", msgs, err)
		}
		if _, err := c.Settle(ctx, msgs[0], queen.StatusDLQ, queen.AckOptions{ConsumerGroup: "d", Error: "bad"}); err != nil {
			t.Fatal(err)
		}
	}
	deadLetterNext()
	want("dlq replay --all", js("dlq", "replay", "orders", "--all"))
	deadLetterNext()
	var letter struct {
		Messages []struct{ PartitionID, TransactionID string }
	}
	_ = json.Unmarshal(js("dlq", "orders"), &letter)
	want("dlq delete", first(js("dlq", "delete", letter.Messages[0].PartitionID+"/"+letter.Messages[0].TransactionID)))
	want("dlq purge", js("dlq", "purge", "orders"))
	lag := js("lag", "orders", "--group", "g")
	want("lag", lag)
	var lp struct{ Partitions []json.RawMessage }
	_ = json.Unmarshal(lag, &lp)
	want("lag partition", lp.Partitions[0])
	want("groups delete", js("groups", "delete", "d"))
	want("health", js("health"))
	want("queues create", js("queues", "create", "made", "--retry-limit", "4"))
	want("queues", first(js("queues")))
	qd := js("queues", "orders")
	want("queues QUEUE", qd)
	var ql struct{ PartitionList []json.RawMessage }
	_ = json.Unmarshal(qd, &ql)
	want("queues QUEUE partition", ql.PartitionList[0])
	want("queues delete", js("queues", "delete", "made"))
	for what := range jsonFields {
		if !seen[what] {
			t.Errorf("%s: not checked", what)
		}
	}
}

// The exit status: 0 ok, 1 the broker refused (or could not be reached),
// 2 a usage error (nothing sent).
func TestExitCodes(t *testing.T) {
	srv := queentest.Start(t)
	env := map[string]string{"QUEEN_URL": srv.URL}
	runEnv(t, env, "", "health").want(t, exitOK)
	runEnv(t, env, "", "push", "orders", "{}").want(t, exitOK)
	runEnv(t, env, "", "fetch", "orders", "Default").want(t, exitOK)
	runEnv(t, env, "", "dlq", "replay", "123").want(t, exitFail)                      // the broker: gone
	runEnv(t, env, "", "seek", "g", "nope", "--to-end", "--create").want(t, exitFail) // the broker: 404
	runEnv(t, env, "", "seek", "g", "orders", "--to-end").want(t, exitFail)           // no such group
	runEnv(t, env, "", "seek", "g", "orders", "--time", "soon").want(t, exitUsage)
	runEnv(t, env, "", "pop", "..").want(t, exitUsage) // a name the client refuses
	runEnv(t, env, "", "pop", "orders", "--batch", "100000").want(t, exitUsage)
	runEnv(t, env, "", "nosuchcommand").want(t, exitUsage)
	if exitOK != 0 || exitFail != 1 || exitUsage != 2 {
		t.Fatal("the documented exit statuses changed")
	}
}
