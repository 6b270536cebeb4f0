package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// brokerReq is one request the fake broker received.
type brokerReq struct {
	Method, Path string
	Query        url.Values
	Body         string
	Auth         string
}

// fakeBroker answers each request with fn and records it.
type fakeBroker struct {
	URL  string
	mu   sync.Mutex
	reqs []brokerReq
	// health, when set, answers GET /health without recording it.
	health string
}

// rawHealth lets GET /health reach the broker's function.
func (b *fakeBroker) rawHealth() *fakeBroker {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.health = ""
	return b
}

func newFakeBroker(t *testing.T, fn func(brokerReq) (int, string)) *fakeBroker {
	t.Helper()
	b := &fakeBroker{health: `{"status":"healthy","engine":"raft","version":"2.0.1"}`}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := brokerReq{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.Query(), Body: string(body), Auth: r.Header.Get("Authorization")}
		b.mu.Lock()
		if r.URL.Path == "/health" && b.health != "" {
			// The generation probe of a time seek or of a group's first
			// pop (not recorded).
			h := b.health
			b.mu.Unlock()
			_, _ = io.WriteString(w, h)
			return
		}
		b.reqs = append(b.reqs, req)
		b.mu.Unlock()
		status, out := fn(req)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, out)
	}))
	t.Cleanup(srv.Close)
	b.URL = srv.URL
	return b
}

func (b *fakeBroker) requests() []brokerReq {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]brokerReq(nil), b.reqs...)
}

// result is one run of the CLI.
type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs the command line with QUEEN_URL pointing at the broker.
func runCLI(t *testing.T, b *fakeBroker, stdin string, args ...string) result {
	t.Helper()
	env := map[string]string{}
	if b != nil {
		env["QUEEN_URL"] = b.URL
	}
	return runEnv(t, env, stdin, args...)
}

func runEnv(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(t.Context(), args, strings.NewReader(stdin), &out, &errb, func(k string) string { return env[k] })
	return result{code, out.String(), errb.String()}
}

func (r result) want(t *testing.T, code int) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	return r
}

const seekAnswer = `{"consumerGroup":"archiver","partitionsUpdated":3,"queueName":"events","seekToEnd":true,"success":true,"targetTimestamp":null}`

// seekBroker answers a seek with answer, and the lookup of the group that
// comes before it (the list of groups) with groups "archiver" and "g"
// having a position on each of queues.
func seekBroker(t *testing.T, status int, answer string, queues ...string) *fakeBroker {
	t.Helper()
	rows := []any{}
	for _, g := range []string{"archiver", "g"} {
		for _, q := range queues {
			rows = append(rows, map[string]any{"name": g, "topics": []string{q}, "queueName": q, "members": 1, "state": "Stable"})
		}
	}
	body, err := json.Marshal(rows)
	if err != nil {
		t.Fatal(err)
	}
	return newFakeBroker(t, func(r brokerReq) (int, string) {
		if r.Method == http.MethodGet && r.Path == "/api/v1/consumer-groups" {
			return 200, string(body)
		}
		return status, answer
	})
}

// seekRequest is the one seek request the broker received, after the
// lookup of the group.
func seekRequest(t *testing.T, b *fakeBroker) brokerReq {
	t.Helper()
	reqs := b.requests()
	if len(reqs) != 2 || reqs[0].Method != http.MethodGet {
		t.Fatalf("requests = %+v, want the group's lookup and the seek", reqs)
	}
	return reqs[1]
}

func TestSeekToEnd(t *testing.T) {
	b := seekBroker(t, 200, seekAnswer, "events")
	// Flags after the arguments work as well as before them.
	r := runCLI(t, b, "", "seek", "archiver", "events", "--to-end").want(t, exitOK)
	if r.stdout != "archiver on events: 3 partitions moved to the end\n" || r.stderr != "" {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	if look := b.requests()[0]; look.Path != "/api/v1/consumer-groups" {
		t.Fatalf("lookup = %+v", look)
	}
	req := seekRequest(t, b)
	if req.Method != "POST" || req.Path != "/api/v1/consumer-groups/archiver/queues/events/seek" || req.Body != `{"toEnd":true}` {
		t.Fatalf("request = %+v", req)
	}
}

func TestSeekToTimeJSON(t *testing.T) {
	b := seekBroker(t, 200, `{"consumerGroup":"archiver","partitionsUpdated":2,"queueName":"events","seekToEnd":false,"success":true,"targetTimestamp":"2026-10-22T00:00:00.000Z"}`, "events")
	r := runCLI(t, b, "", "--json", "seek", "--time", "2026-10-22T00:00:00Z", "archiver", "events").want(t, exitOK)
	var got map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, r.stdout)
	}
	if got["partitionsUpdated"] != 2.0 || got["toEnd"] != false || got["timestamp"] != "2026-10-22T00:00:00Z" || got["consumerGroup"] != "archiver" {
		t.Fatalf("json = %v", got)
	}
	if body := seekRequest(t, b).Body; body != `{"timestamp":"2026-10-22T00:00:00Z"}` {
		t.Fatalf("body = %s", body)
	}
}

func TestSeekPartitionText(t *testing.T) {
	b := seekBroker(t, 200, `{"consumerGroup":"g","partitionsUpdated":1,"queueName":"q","partitionName":"p1","seekToEnd":true,"success":true}`, "q")
	r := runCLI(t, b, "", "seek", "--partition", "p1", "--to-end", "g", "q").want(t, exitOK)
	if r.stdout != "g on q/p1: 1 partitions moved to the end\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
	if p := seekRequest(t, b).Path; p != "/api/v1/consumer-groups/g/queues/q/partitions/p1/seek" {
		t.Fatalf("path %s", p)
	}
}

func TestUsageErrorsSendNothing(t *testing.T) {
	b := newFakeBroker(t, func(brokerReq) (int, string) { return 200, seekAnswer })
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"seek", "g"},
		{"seek", "g", "q"},
		{"seek", "g", "q", "--to-end", "--time", "2026-10-22T00:00:00Z"},
		{"seek", "g", "q", "--time", "yesterday"},
		{"seek", "g", "q", "--to-end", "--bogus"},
		{"push", "q", "{not json"},
		{"push", "q", "--txid", "t", "1", "2"},
		{"pop"},
		{"fetch", "q"},
		{"dlq", "q", "--from", "today"},
		{"dlq", "replay"},
		{"dlq", "replay", "row-1", "--group", "g"}, // filters go with replay --all
		{"dlq", "replay", "17/"},
		{"dlq", "delete", "row-1"}, // deleted by address only
		{"dlq", "delete"},
		{"dlq", "purge"},
		{"dlq", "purge", "q", "--limit", "3"},
		{"lag"},
		{"lag", "q", "--timeout", "1s"}, // a timeout without --wait would be ignored
		{"lag", "q", "--wait", "--interval", "0s"},
		{"groups", "a", "b"},
		{"groups", "--queue", "q"},
		{"pop", "q", "--timeout-ms", "5000"},       // a wait time without --wait would be ignored
		{"pop", "q", "--subscription-mode", "all"}, // a subscription mode needs --group
	} {
		r := runCLI(t, b, "", args...)
		if r.code != exitUsage || r.stderr == "" || r.stdout != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 with a message", args, r.code, r.stdout, r.stderr)
		}
	}
	if n := len(b.requests()); n != 0 {
		t.Fatalf("%d requests sent for bad command lines", n)
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		r := runCLI(t, nil, "", args...).want(t, exitOK)
		if !strings.Contains(r.stdout, "usage: queen") {
			t.Fatalf("%q: %q", args, r.stdout)
		}
	}
}

func TestBrokerErrorExitsOneWithItsMessage(t *testing.T) {
	b := seekBroker(t, 404, `{"success":false,"error":"Queue not found or has no partitions","consumerGroup":"g","queueName":"nope","partitionsUpdated":0}`, "nope")
	r := runCLI(t, b, "", "seek", "g", "nope", "--to-end").want(t, exitFail)
	if !strings.Contains(r.stderr, "Queue not found or has no partitions") || !strings.HasPrefix(r.stderr, "queen seek: ") || r.stdout != "" {
		t.Fatalf("stderr %q stdout %q", r.stderr, r.stdout)
	}
}

func TestNoBrokerExitsOne(t *testing.T) {
	t.Parallel() // the transport retries (about 1.5 s)
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	r := runEnv(t, map[string]string{}, "", "--url", url, "health")
	if r.code != exitFail || r.stderr == "" {
		t.Fatalf("exit %d stderr %q", r.code, r.stderr)
	}
}

func TestURLAndTokenFromEnvAndFlags(t *testing.T) {
	b := newFakeBroker(t, func(brokerReq) (int, string) { return 200, `{"status":"healthy","engine":"raft","version":"2.7.1"}` }).rawHealth()
	runEnv(t, map[string]string{"QUEEN_URL": b.URL, "QUEEN_TOKEN": "from-env"}, "", "health").want(t, exitOK)
	runEnv(t, map[string]string{"QUEEN_URL": "http://127.0.0.1:1", "QUEEN_TOKEN": "from-env"}, "", "health", "--url", b.URL, "--token", "from-flag").want(t, exitOK)
	reqs := b.requests()
	if reqs[0].Auth != "Bearer from-env" || reqs[1].Auth != "Bearer from-flag" {
		t.Fatalf("auth = %q, %q", reqs[0].Auth, reqs[1].Auth)
	}
}

func TestHealth(t *testing.T) {
	t.Parallel() // the transport retries (about 1.5 s)
	b := newFakeBroker(t, func(brokerReq) (int, string) { return 200, `{"status":"healthy","engine":"raft","version":"2.7.1"}` }).rawHealth()
	r := runCLI(t, b, "", "health").want(t, exitOK)
	if r.stdout != "healthy\traft\t2.7.1\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
	b = newFakeBroker(t, func(brokerReq) (int, string) { return 503, `{"status":"settling","engine":"raft"}` }).rawHealth()
	r = runCLI(t, b, "", "health").want(t, exitFail)
	if !strings.Contains(r.stderr, "settling") {
		t.Fatalf("stderr %q", r.stderr)
	}
}

func TestGroups(t *testing.T) {
	b := newFakeBroker(t, func(r brokerReq) (int, string) {
		switch {
		case r.Method == "GET" && r.Path == "/api/v1/consumer-groups":
			return 200, `[{"name":"billing","queueName":"orders","members":2,"partitionCursors":2,"partitionsWithLag":1,"totalLag":17,"maxTimeLag":420,"state":"Lagging","subscriptionMode":"all","conflation":false}]`
		case r.Method == "GET":
			return 200, `{"orders":{"conflation":false,"partitions":[{"partition":"p1","totalConsumed":9,"offsetLag":3,"timeLagSeconds":60,"leaseActive":true}]}}`
		default:
			return 200, `{"success":true,"consumerGroup":"billing","queueName":"orders","deletedPartitions":2,"metadataDeleted":true}`
		}
	})
	r := runCLI(t, b, "", "groups").want(t, exitOK)
	want := "GROUP    QUEUE   STATE    LAG  PARTITIONS_LAGGING  MAX_TIME_LAG  MODE\n" +
		"billing  orders  Lagging  17   1                   7m0s          all\n"
	if r.stdout != want {
		t.Fatalf("stdout\n%s\nwant\n%s", r.stdout, want)
	}
	r = runCLI(t, b, "", "groups", "billing").want(t, exitOK)
	if !strings.Contains(r.stdout, "orders  p1         3    1m0s      9         true") {
		t.Fatalf("stdout\n%s", r.stdout)
	}
	r = runCLI(t, b, "", "groups", "delete", "billing", "--queue", "orders").want(t, exitOK)
	if r.stdout != "deleted billing: 2 partition positions\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
	last := b.requests()[2]
	if last.Method != "DELETE" || last.Path != "/api/v1/consumer-groups/billing/queues/orders" || last.Query.Get("deleteMetadata") != "true" {
		t.Fatalf("request %+v", last)
	}
	r = runCLI(t, b, "", "--json", "groups").want(t, exitOK)
	var gs []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &gs); err != nil || len(gs) != 1 || gs[0]["totalLag"] != 17.0 {
		t.Fatalf("json %v (%v)", gs, err)
	}
	// Durations print in seconds, as the broker reports them (not Go's
	// nanoseconds).
	if gs[0]["maxTimeLag"] != 420.0 {
		t.Fatalf("maxTimeLag = %v, want 420 (seconds)", gs[0]["maxTimeLag"])
	}
	r = runCLI(t, b, "", "--json", "groups", "billing").want(t, exitOK)
	var d struct {
		Queues map[string]struct {
			Partitions []map[string]any `json:"partitions"`
		} `json:"queues"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || len(d.Queues["orders"].Partitions) != 1 {
		t.Fatalf("json %s (%v)", r.stdout, err)
	}
	if p := d.Queues["orders"].Partitions[0]; p["timeLag"] != 60.0 || p["offsetLag"] != 3.0 || p["partition"] != "p1" {
		t.Fatalf("partition = %v, want timeLag 60 (seconds)", p)
	}
}

func TestPush(t *testing.T) {
	b := newFakeBroker(t, func(r brokerReq) (int, string) {
		var req struct {
			Items []struct {
				TransactionID string `json:"transactionId"`
			} `json:"items"`
		}
		_ = json.Unmarshal([]byte(r.Body), &req)
		var out []string
		for i, it := range req.Items {
			out = append(out, `{"index":`+string(rune('0'+i))+`,"message_id":"m`+string(rune('0'+i))+`","transaction_id":"`+it.TransactionID+`","queueName":"q","status":"queued"}`)
		}
		return 201, "[" + strings.Join(out, ",") + "]"
	})
	r := runCLI(t, b, "", "push", "q", `{"a":1}`, "--partition", "p", "--txid", "tx-1").want(t, exitOK)
	if r.stdout != "queued\ttx-1\tm0\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
	if body := b.requests()[0].Body; body != `{"items":[{"queue":"q","partition":"p","payload":{"a":1},"transactionId":"tx-1"}]}` {
		t.Fatalf("body %s", body)
	}
	r = runCLI(t, b, "{\"n\":1}\n\n  7  \n", "push", "q").want(t, exitOK)
	if strings.Count(r.stdout, "queued\t") != 2 {
		t.Fatalf("stdout %q", r.stdout)
	}
	if body := b.requests()[1].Body; !strings.Contains(body, `"payload":{"n":1}`) || !strings.Contains(body, `"payload":7`) {
		t.Fatalf("body %s", body)
	}
	runCLI(t, b, "", "push", "q").want(t, exitUsage) // nothing on stdin

	// --json uses the same camelCase keys as every other command.
	r = runCLI(t, b, "", "--json", "push", "q", "1").want(t, exitOK)
	var res []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || len(res) != 1 {
		t.Fatalf("json %s (%v)", r.stdout, err)
	}
	if res[0]["status"] != "queued" || res[0]["messageId"] != "m0" || res[0]["transactionId"] == nil || res[0]["queue"] != "q" || res[0]["index"] != 0.0 {
		t.Fatalf("json %v", res[0])
	}
}

func TestPushRefused(t *testing.T) {
	b := newFakeBroker(t, func(brokerReq) (int, string) {
		return 201, `[{"index":0,"transaction_id":"t","queueName":"q","status":"error","error":"storage full"}]`
	})
	r := runCLI(t, b, "", "push", "q", "1").want(t, exitFail)
	if !strings.Contains(r.stdout, "error\t") || !strings.Contains(r.stderr, "storage full") {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
}

func TestPopAndAck(t *testing.T) {
	b := newFakeBroker(t, func(r brokerReq) (int, string) {
		if r.Method == "GET" && strings.HasPrefix(r.Path, "/api/v1/consumer-groups/") {
			return 404, `{"error":"Consumer group not found"}` // the lookup before a group's first pop
		}
		if r.Method == "GET" {
			return 200, `{"success":true,"queue":"q","leaseId":"L","consumerGroup":"g","messages":[
			 {"id":"1","transactionId":"t1","partitionId":"17","partition":"p","leaseId":"L","consumerGroup":"g","data":{"n":1},"createdAt":"2026-10-22T00:00:00Z","offset":4,"deliveryAttempt":1},
			 {"id":"2","transactionId":"t2","partitionId":"17","partition":"p","leaseId":"L","consumerGroup":"g","data":[2],"createdAt":"2026-10-22T00:00:00Z","offset":5,"deliveryAttempt":1}]}`
		}
		return 200, `[{"index":0,"transactionId":"t1","success":true,"error":null,"leaseReleased":false,"dlq":false},{"index":1,"transactionId":"t2","success":true,"error":null,"leaseReleased":true,"dlq":false}]`
	})
	r := runCLI(t, b, "", "pop", "q", "--group", "g", "--batch", "10", "--subscription-mode", "all", "--ack").want(t, exitOK)
	if r.stdout != "p\tt1\t{\"n\":1}\np\tt2\t[2]\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
	reqs := b.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests %+v: want the group's pop and its ack (a 2.x broker: no lookup of the group)", len(reqs), reqs)
	}
	q := reqs[0].Query
	if reqs[0].Path != "/api/v1/pop/queue/q" || q.Get("consumerGroup") != "g" || q.Get("batch") != "10" || q.Get("subscriptionMode") != "all" || q.Get("wait") != "false" {
		t.Fatalf("pop %+v", reqs[0])
	}
	if reqs[1].Path != "/api/v1/ack/batch" || !strings.Contains(reqs[1].Body, `"consumerGroup":"g"`) || strings.Count(reqs[1].Body, `"status":"completed"`) != 2 {
		t.Fatalf("ack %+v", reqs[1])
	}

	r = runCLI(t, b, "", "--json", "pop", "q", "--group", "g").want(t, exitOK)
	var msgs []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &msgs); err != nil || len(msgs) != 2 || msgs[0]["offset"] != 4.0 || msgs[0]["leaseId"] != "L" {
		t.Fatalf("json %v (%v)", msgs, err)
	}
	if all := b.requests(); len(all) != 4 || all[2].Method != "GET" || all[2].Query.Get("subscriptionMode") != "new" || all[3].Path != "/api/v1/resources/queues/q" {
		t.Fatalf("%d requests %+v: want a pop with its start point, then the queue's lease time read, no ack without --ack", len(all), all)
	}
	if !strings.Contains(r.stderr, "2 messages left leased for group g (lease L)") {
		t.Fatalf("stderr %q, want the messages left leased", r.stderr)
	}
}

func TestFetch(t *testing.T) {
	b := newFakeBroker(t, func(r brokerReq) (int, string) {
		return 200, `{"entries":[
		 {"queue":"orders","partition":"customer-42","records":[{"offset":0,"transactionId":"a","payload":{"total":10},"ts":"2026-10-22T00:00:00Z"}],"highWatermark":1,"logStartOffset":0},
		 {"queue":"orders","partition":"nope","records":[],"highWatermark":0,"logStartOffset":0,"error":"OFFSET_OUT_OF_RANGE"}]}`
	})
	r := runCLI(t, b, "", "fetch", "orders", "customer-42", "nope", "--offset", "0").want(t, exitFail)
	if r.stdout != "customer-42\t0\t{\"total\":10}\n" || !strings.Contains(r.stderr, "out of range") {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	if body := b.requests()[0].Body; !strings.Contains(body, `"offset":0`) {
		t.Fatalf("body %s", body)
	}
}

func TestFetchAllJSON(t *testing.T) {
	b := newFakeBroker(t, func(r brokerReq) (int, string) {
		var req struct {
			Entries []struct {
				Offset int `json:"offset"`
			} `json:"entries"`
		}
		_ = json.Unmarshal([]byte(r.Body), &req)
		o := req.Entries[0].Offset
		if o >= 3 {
			return 200, `{"entries":[{"queue":"q","partition":"p","records":[],"highWatermark":3,"logStartOffset":0}]}`
		}
		return 200, `{"entries":[{"queue":"q","partition":"p","records":[{"offset":` + string(rune('0'+o)) + `,"transactionId":"t","payload":1,"ts":""}],"highWatermark":3,"logStartOffset":0}]}`
	})
	r := runCLI(t, b, "", "fetch", "q", "p", "--all", "--json").want(t, exitOK)
	var got map[string]struct {
		Records []struct {
			Offset int64 `json:"offset"`
		} `json:"records"`
		HighWatermark int64 `json:"highWatermark"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if p := got["p"]; len(p.Records) != 3 || p.Records[2].Offset != 2 || p.HighWatermark != 3 {
		t.Fatalf("json %+v", got)
	}
}

func TestFetchNotSupported(t *testing.T) {
	b := newFakeBroker(t, func(brokerReq) (int, string) { return 404, `<html><body><h1>File Not Found</h1></body></html>` })
	r := runCLI(t, b, "", "fetch", "q", "p").want(t, exitFail)
	if !strings.Contains(r.stderr, "not supported by this broker") {
		t.Fatalf("stderr %q", r.stderr)
	}
}

func TestDLQ(t *testing.T) {
	b := newFakeBroker(t, func(r brokerReq) (int, string) {
		if r.Method == "GET" {
			return 200, `{"messages":[{"id":"row-1","queue":"emails","partition":"p1","partitionId":"17","consumerGroup":"mailer","offset":4,"transactionId":"tx-4","payload":{"to":"x"},"errorMessage":"bounced","retryCount":3,"failedAt":"2026-10-02T10:00:00.000000Z"}],"total":1,"pagination":{"limit":100,"offset":0}}`
		}
		return 200, `{"success":true,"result":"moved","queue":"emails","partition":"p1","replayedAs":{"index":0,"message_id":"m","transaction_id":"dlq:row-1","status":"queued","offset":12}}`
	})
	r := runCLI(t, b, "", "dlq", "emails", "--group", "mailer", "--from", "2026-10-01T00:00:00Z").want(t, exitOK)
	want := "ID     PARTITION  GROUP   FAILED_AT             RETRIES  ERROR    PAYLOAD\n" +
		"row-1  p1         mailer  2026-10-02T10:00:00Z  3        bounced  {\"to\":\"x\"}\n" +
		"total 1\n"
	if r.stdout != want {
		t.Fatalf("stdout\n%s\nwant\n%s", r.stdout, want)
	}
	q := b.requests()[0].Query
	if q.Get("queue") != "emails" || q.Get("consumerGroup") != "mailer" || q.Get("from") != "2026-10-01T00:00:00Z" {
		t.Fatalf("query %v", q)
	}
	r = runCLI(t, b, "", "dlq", "replay", "row-1").want(t, exitOK)
	if r.stdout != "moved\trow-1\temails/p1\t12\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
	if p := b.requests()[1].Path; p != "/api/v1/dlq/row-1/replay" {
		t.Fatalf("path %s", p)
	}
	r = runCLI(t, b, "", "--json", "dlq", "list", "emails").want(t, exitOK)
	var page struct {
		Total    int `json:"total"`
		Messages []struct {
			ID    string `json:"id"`
			Error string `json:"error"`
		} `json:"messages"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil || page.Total != 1 || page.Messages[0].Error != "bounced" {
		t.Fatalf("json %+v (%v)", page, err)
	}
}

func TestDLQReplayGone(t *testing.T) {
	b := newFakeBroker(t, func(brokerReq) (int, string) {
		return 404, `{"success":false,"result":"gone","error":"Message not found"}`
	})
	r := runCLI(t, b, "", "dlq", "replay", "row-9").want(t, exitFail)
	if !strings.Contains(r.stderr, "replay row-9") || !strings.Contains(r.stderr, "Message not found") {
		t.Fatalf("stderr %q", r.stderr)
	}
}

// dlq's --from and --to take a duration ago, as seek's --time does; a
// negative one is a usage error.
func TestDLQFromDuration(t *testing.T) {
	b := newFakeBroker(t, func(brokerReq) (int, string) {
		return 200, `{"messages":[],"total":0,"pagination":{"limit":100,"offset":0}}`
	})
	before := time.Now()
	runCLI(t, b, "", "dlq", "emails", "--from", "2h", "--to", "1h").want(t, exitOK)
	after := time.Now()
	var q url.Values
	for _, r := range b.requests() {
		if r.Method == "GET" && r.Path == "/api/v1/dlq" {
			q = r.Query
		}
	}
	for _, tt := range []struct {
		key string
		ago time.Duration
	}{{"from", 2 * time.Hour}, {"to", time.Hour}} {
		got, err := time.Parse(time.RFC3339Nano, q.Get(tt.key))
		if err != nil {
			t.Fatalf("%s: query %v", tt.key, q)
		}
		if got.Before(before.Add(-tt.ago).Add(-time.Microsecond)) || got.After(after.Add(-tt.ago)) {
			t.Errorf("--%s sent %v, want %v ago (now %v)", tt.key, got, tt.ago, before)
		}
	}
	r := runCLI(t, b, "", "dlq", "emails", "--from", "-1h").want(t, exitUsage)
	if !strings.Contains(r.stderr, "duration ago") {
		t.Fatalf("stderr %q", r.stderr)
	}
}
