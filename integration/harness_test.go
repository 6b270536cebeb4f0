package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// Time limits of the scenarios. They are generous for a real broker and
// never reached on queentest unless something is wrong.
const (
	// scenarioTimeout bounds one scenario.
	scenarioTimeout = 45 * time.Second
	// shortWaitMs is the long-poll wait of pops that expect a message soon.
	shortWaitMs = 3000
	// visibleWithin bounds the wait for messages just pushed: a broker may
	// answer a push before a pop sees its messages (a 0.15.1 broker in a
	// container did, once in four runs), so a read right after a push
	// polls (popPushed, drain) rather than trusting one no-wait pop.
	visibleWithin = 5 * time.Second
)

// testCtx returns a context that ends with the test or after
// scenarioTimeout, whichever comes first.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	t.Cleanup(cancel)
	return ctx
}

// unique returns base with a random suffix, so that runs and scenarios
// sharing a broker never meet.
func unique(base string) string {
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return "it-" + base + "-" + hex.EncodeToString(b[:])
}

// clientOpts are the options of every scenario's client: quick retries so
// that a fault costs milliseconds, not seconds.
func clientOpts() []queen.Option {
	return []queen.Option{
		queen.WithRequestTimeout(10 * time.Second),
		queen.WithRetryPolicy(queen.RetryPolicy{
			MaxAttempts:   6,
			MinBackoff:    20 * time.Millisecond,
			MaxBackoff:    300 * time.Millisecond,
			FailoverPause: 100 * time.Millisecond,
		}),
	}
}

// newClient returns a client of the backend (or of url, when given) that is
// closed when the test ends, with its connections. aliases, when non-nil,
// maps the queue names the test uses to the names sent to the broker (see
// aliasTransport).
func newClientAt(t *testing.T, brokerURL string, aliases map[string]string) *queen.Client {
	t.Helper()
	return newClientVia(t, brokerURL, aliases, nil)
}

// newClientVia is newClientAt with wrap (when non-nil) around the
// transport, to watch the requests.
func newClientVia(t *testing.T, brokerURL string, aliases map[string]string, wrap func(http.RoundTripper) http.RoundTripper) *queen.Client {
	t.Helper()
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 64
	var rt http.RoundTripper = base
	if aliases != nil {
		rt = newAliasTransport(base, aliases)
	}
	if wrap != nil {
		rt = wrap(rt)
	}
	opts := append(clientOpts(), queen.WithHTTPClient(&http.Client{Transport: rt}))
	if brokerURL == be.url && len(be.urls) > 1 {
		opts = append(opts, queen.WithURLs(be.urls[1:]...))
	}
	c, err := queen.New(brokerURL, opts...)
	if err != nil {
		t.Fatalf("queen.New(%q): %v", brokerURL, err)
	}
	t.Cleanup(func() {
		_ = c.Close(context.Background())
		base.CloseIdleConnections()
	})
	return c
}

// newClient returns a client of the run's broker; see newClientAt.
func newClient(t *testing.T) *queen.Client {
	t.Helper()
	return newClientAt(t, be.url, nil)
}

// newQueue creates the queue name with cfg and deletes it when the test
// ends.
func newQueue(t *testing.T, c *queen.Client, name string, cfg queen.QueueConfig) {
	t.Helper()
	ctx := testCtx(t)
	if _, err := c.Queue(name).Config(cfg).Create().Execute(ctx); err != nil {
		t.Fatalf("create queue %s: %v", name, err)
	}
	deleteAtEnd(t, c, name)
}

// deleteAtEnd deletes the queue when the test ends (best effort: on a shared
// broker, scenarios clean up after themselves).
func deleteAtEnd(t *testing.T, c *queen.Client, name string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.Queue(name).Delete().Execute(ctx); err != nil {
			t.Logf("delete queue %s: %v", name, err)
		}
	})
}

// push stores the payloads in one partition ("" = Default) and fails the
// test unless every one is queued.
func push(t *testing.T, c *queen.Client, queue, partition string, payloads ...any) []queen.PushResult {
	t.Helper()
	ctx := testCtx(t)
	qb := c.Queue(queue)
	if partition != "" {
		qb = qb.Partition(partition)
	}
	res, err := qb.Push(payloads...).Execute(ctx)
	if err != nil {
		t.Fatalf("push %d messages to %s/%s: %v", len(payloads), queue, partition, err)
	}
	for _, r := range res {
		if r.Status != queen.PushQueued {
			t.Fatalf("push to %s/%s: message %d is %s (%s), want queued", queue, partition, r.Index, r.Status, r.Error)
		}
	}
	return res
}

// numbered returns n payloads {"n": from+i, ...extra}.
func numbered(from, n int, extra map[string]any) []any {
	out := make([]any, n)
	for i := range n {
		m := map[string]any{"n": from + i}
		for k, v := range extra {
			m[k] = v
		}
		out[i] = m
	}
	return out
}

// num reads the "n" field of a numbered payload.
func num(t *testing.T, m *queen.Message) int {
	t.Helper()
	v, ok := m.Data["n"].(float64)
	if !ok {
		t.Fatalf("message %s has no number: %s", m.TransactionID, m.Raw)
	}
	return int(v)
}

// popNow pops once without waiting.
func popNow(t *testing.T, qb *queen.QueueBuilder) []*queen.Message {
	t.Helper()
	msgs, err := qb.Wait(false).Pop(testCtx(t))
	if err != nil {
		t.Fatalf("pop %s: %v", qb, err)
	}
	return msgs
}

// popPushed pops messages just pushed: without waiting, again and again,
// until it gets some or visibleWithin passes. For a pop that expects
// nothing, popNow.
func popPushed(t *testing.T, qb *queen.QueueBuilder) []*queen.Message {
	t.Helper()
	return popWithin(t, qb, visibleWithin)
}

// awaitPushed waits until n messages pushed to queue are seen by a pop: a
// group of its own (SubscriptionModeAll) pops and acks them, polling up
// to visibleWithin. For a read that must stay a no-wait pop (a page's
// snippet), so that it does not race the push.
func awaitPushed(t *testing.T, c *queen.Client, queue string, n int) {
	t.Helper()
	group := unique("visible")
	probe := c.Queue(queue).Group(group).SubscriptionMode(queen.SubscriptionModeAll).Batch(100)
	deadline := time.Now().Add(visibleWithin)
	seen := 0
	for seen < n {
		msgs := popNow(t, probe)
		ackAll(t, c, group, msgs)
		seen += len(msgs)
		if seen >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: a pop saw %d of the %d messages pushed within %s", queue, seen, n, visibleWithin)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// popWithin pops without waiting, again and again, until it gets messages
// or d passes. It suits messages that come back after a delay (a lease
// expiry, delayed processing), which not every broker wakes a parked long
// poll for.
func popWithin(t *testing.T, qb *queen.QueueBuilder, d time.Duration) []*queen.Message {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if msgs := popNow(t, qb); len(msgs) > 0 || time.Now().After(deadline) {
			return msgs
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// popWait pops once, waiting up to ms milliseconds for messages.
func popWait(t *testing.T, qb *queen.QueueBuilder, ms int) []*queen.Message {
	t.Helper()
	msgs, err := qb.Wait(true).TimeoutMillis(ms).Pop(testCtx(t))
	if err != nil {
		t.Fatalf("pop %s: %v", qb, err)
	}
	return msgs
}

// ackAll acks msgs completed in one request.
func ackAll(t *testing.T, c *queen.Client, group string, msgs []*queen.Message) {
	t.Helper()
	if len(msgs) == 0 {
		return
	}
	acks := make([]queen.Settlement, len(msgs))
	for i, m := range msgs {
		acks[i] = queen.Settlement{Message: m, Status: queen.StatusCompleted}
	}
	if _, err := c.SettleBatch(testCtx(t), acks, queen.AckOptions{ConsumerGroup: group}); err != nil {
		t.Fatalf("ack %d messages: %v", len(msgs), err)
	}
}

// drain pops and acks (as group) until a pop waiting waitMs comes back
// empty, and returns what it got, in delivery order. With waitMs 0 its
// first pop is popPushed (it polls up to visibleWithin for messages just
// pushed), the others do not wait.
func drain(t *testing.T, c *queen.Client, qb *queen.QueueBuilder, group string, waitMs int) []*queen.Message {
	t.Helper()
	var all []*queen.Message
	for {
		var msgs []*queen.Message
		if waitMs == 0 && all == nil {
			msgs = popPushed(t, qb)
		} else if waitMs == 0 {
			msgs = popNow(t, qb)
		} else {
			msgs = popWait(t, qb, waitMs)
		}
		if len(msgs) == 0 {
			return all
		}
		ackAll(t, c, group, msgs)
		all = append(all, msgs...)
	}
}

// nums returns the numbers of numbered messages, in order.
func nums(t *testing.T, msgs []*queen.Message) []int {
	t.Helper()
	out := make([]int, len(msgs))
	for i, m := range msgs {
		out[i] = num(t, m)
	}
	return out
}

// checkExactlyOnce fails the test unless got holds each of the numbers
// from..from+n-1 exactly once, and nothing else.
func checkExactlyOnce(t *testing.T, what string, got []int, from, n int) {
	t.Helper()
	seen := map[int]int{}
	for _, v := range got {
		seen[v]++
	}
	var missing, twice []int
	for i := from; i < from+n; i++ {
		switch seen[i] {
		case 0:
			missing = append(missing, i)
		case 1:
		default:
			twice = append(twice, i)
		}
		delete(seen, i)
	}
	var foreign []int
	for v := range seen {
		foreign = append(foreign, v)
	}
	if len(missing)+len(twice)+len(foreign) > 0 {
		t.Errorf("%s: want each of %d..%d exactly once; missing %v, more than once %v, unexpected %v",
			what, from, from+n-1, missing, twice, foreign)
	}
}

// inProcess returns the in-process broker, or skips the test with the
// reason when the run's backend is another.
func inProcess(t *testing.T, need string) *queentest.Server {
	t.Helper()
	if be.srv == nil {
		t.Skipf("%s needs the in-process broker (queentest); this run uses %s at %s", need, be.kind, be.url)
	}
	return be.srv
}

// faultBroker starts a private in-process broker for a scenario that
// injects faults, so that the faults never reach the scenarios running in
// parallel. It skips when the run's backend is not queentest: a real broker
// cannot be told to drop its answers.
func faultBroker(t *testing.T, need string) *queentest.Server {
	t.Helper()
	inProcess(t, need)
	return queentest.Start(t, queentest.WithProfile(be.profile))
}

// eventually polls cond every 20 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// recorder stands in for fmt in the documentation's snippets: it keeps what
// they print, so that the test can check it against what the page says.
type recorder struct {
	mu    sync.Mutex
	lines []string
}

// Println records one line formatted like fmt.Println.
func (r *recorder) Println(a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, strings.TrimSuffix(fmt.Sprintln(a...), "\n"))
}

// Lines returns the recorded lines.
func (r *recorder) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// fatal stands in for the log package in the documentation's snippets:
// log.Fatal fails the test instead of ending the process.
type fatal struct{ t *testing.T }

// Fatal fails the test with the error.
func (f fatal) Fatal(v ...any) {
	f.t.Helper()
	f.t.Fatal(append([]any{"snippet failed: "}, v...)...)
}

// aliasTransport lets a scenario use fixed queue names (the documentation's
// "orders", "events", ...) while the broker sees unique ones: it rewrites
// the queue names of every request (path segments after /queue/ or
// /queues/, the "queue" query parameter, and "queue"/"queueName" fields of
// JSON bodies) and rewrites them back in the answers.
type aliasTransport struct {
	base      http.RoundTripper
	toBroker  map[string]string
	fromBroke map[string]string
}

func newAliasTransport(base http.RoundTripper, aliases map[string]string) *aliasTransport {
	back := make(map[string]string, len(aliases))
	for k, v := range aliases {
		back[v] = k
	}
	return &aliasTransport{base: base, toBroker: aliases, fromBroke: back}
}

// RoundTrip implements http.RoundTripper.
func (a *aliasTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	out.URL.Path = a.rewritePath(req.URL.Path)
	out.URL.RawPath = ""
	if q := req.URL.Query(); q.Has("queue") {
		if v, ok := a.toBroker[q.Get("queue")]; ok {
			q.Set("queue", v)
			out.URL.RawQuery = q.Encode()
		}
	}
	if req.Body != nil && req.Body != http.NoBody {
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = rewriteJSON(body, a.toBroker)
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.ContentLength = int64(len(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	resp, err := a.base.RoundTrip(out)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	body = rewriteJSON(body, a.fromBroke)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Del("Content-Length")
	return resp, nil
}

func (a *aliasTransport) rewritePath(p string) string {
	segs := strings.Split(p, "/")
	for i := 1; i < len(segs); i++ {
		if segs[i-1] != "queue" && segs[i-1] != "queues" {
			continue
		}
		if v, ok := a.toBroker[segs[i]]; ok {
			segs[i] = v
		}
	}
	return strings.Join(segs, "/")
}

// rewriteJSON renames queue names in the "queue" and "queueName" fields of a
// JSON document; anything that is not JSON is returned as it is.
func rewriteJSON(body []byte, names map[string]string) []byte {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || (trimmed[0] != '{' && trimmed[0] != '[') {
		return body
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return body
	}
	if !renameQueues(doc, names) {
		return body
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return body
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n"))
}

func renameQueues(v any, names map[string]string) bool {
	changed := false
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if s, ok := val.(string); ok && (k == "queue" || k == "queueName") {
				if n, ok := names[s]; ok {
					x[k] = n
					changed = true
				}
				continue
			}
			changed = renameQueues(val, names) || changed
		}
	case []any:
		for _, e := range x {
			changed = renameQueues(e, names) || changed
		}
	}
	return changed
}

// aliases returns a map from each name to a unique broker name.
func aliases(names ...string) map[string]string {
	m := make(map[string]string, len(names))
	for _, n := range names {
		m[n] = unique(n)
	}
	return m
}

// isNotSupported reports whether err says the broker lacks a route.
func isNotSupported(err error) bool {
	if errors.Is(err, queen.ErrNotSupported) {
		return true
	}
	var brokerErr *queen.BrokerError
	return errors.As(err, &brokerErr) && brokerErr.Status == http.StatusNotFound
}

// jsonUnmarshal decodes a payload.
func jsonUnmarshal(raw []byte, v any) error { return json.Unmarshal(raw, v) }
