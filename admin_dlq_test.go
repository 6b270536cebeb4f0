package queen_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// deadLetterAll pushes n numbered messages ({"i": 0..n-1}) to each of
// partitions and makes group dead-letter every one of them.
func deadLetterAll(t *testing.T, c *queen.Client, queue, group string, n int, partitions ...string) {
	t.Helper()
	for _, p := range partitions {
		items := make([]any, n)
		for i := range items {
			items[i] = map[string]any{"p": p, "i": i}
		}
		mustPush(t, c, queue, p, items...)
	}
	for left := n * len(partitions); left > 0; {
		msgs, err := c.Queue(queue).Group(group).SubscriptionMode(queen.SubscriptionModeAll).Batch(50).Wait(false).Pop(t.Context())
		if err != nil || len(msgs) == 0 {
			t.Fatalf("pop: %d messages, %v (%d left to dead-letter)", len(msgs), err, left)
		}
		acks := make([]queen.Settlement, len(msgs))
		for i, m := range msgs {
			acks[i] = queen.Settlement{Message: m, Status: queen.StatusDLQ, Error: "endpoint down"}
		}
		if _, err := c.SettleBatch(t.Context(), acks, queen.AckOptions{ConsumerGroup: group}); err != nil {
			t.Fatal(err)
		}
		left -= len(msgs)
	}
}

// readAll pops everything group can read from queue now, acking it.
func readAll(t *testing.T, c *queen.Client, queue, group string) []*queen.Message {
	t.Helper()
	var out []*queen.Message
	for {
		msgs := popAll(t, c, queue, group)
		if len(msgs) == 0 {
			return out
		}
		ackAll(t, c, msgs, group)
		out = append(out, msgs...)
	}
}

// copiesByPartition keeps the replayed copies (transaction id "dlq:...")
// of msgs and returns their "i" in the order read, by partition.
func copiesByPartition(t *testing.T, msgs []*queen.Message) map[string][]int {
	t.Helper()
	out := map[string][]int{}
	for _, m := range msgs {
		if !strings.HasPrefix(m.TransactionID, "dlq:") {
			continue
		}
		var v struct{ I int }
		if err := json.Unmarshal(m.Raw, &v); err != nil {
			t.Fatal(err)
		}
		out[m.Partition] = append(out[m.Partition], v.I)
	}
	return out
}

// Replaying 200 dead letters twice stores 200 copies, in each partition in
// the order of the originals, and removes the letters; the copies reach
// every group (audit, which had read the originals, too); replaying a
// letter again stores nothing more, on both generations.
func TestQueentestReplayDeadLettersTwice(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			srv, c := newBroker(t, queentest.WithProfile(p))
			ctx := t.Context()
			deadLetterAll(t, c, "hooks", "sender", 100, "c1", "c2")
			if got := len(readAll(t, c, "hooks", "audit")); got != 200 {
				t.Fatalf("audit read %d messages, want 200", got)
			}
			page, err := c.Admin().ListDLQ(ctx, "hooks", queen.DLQListOptions{Limit: 1})
			if err != nil || page.Total != 200 {
				t.Fatalf("dead letters: %+v, %v", page.Total, err)
			}
			stale := page.Messages[0]

			rep, err := c.Admin().ReplayDeadLetters(ctx, "hooks", queen.DLQListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Moved != 200 || rep.Removed != 200 || rep.Kept != 0 || rep.Duplicate != 0 || rep.Gone != 0 || len(rep.Results) != 200 {
				t.Fatalf("first pass: moved %d, removed %d, kept %d, duplicate %d, gone %d, %d results",
					rep.Moved, rep.Removed, rep.Kept, rep.Duplicate, rep.Gone, len(rep.Results))
			}
			if n := srv.DLQCount("hooks"); n != 0 {
				t.Fatalf("%d letters left after the replay", n)
			}
			rep, err = c.Admin().ReplayDeadLetters(ctx, "hooks", queen.DLQListOptions{})
			if err != nil || len(rep.Results) != 0 || rep.Gone != 0 {
				t.Fatalf("second pass: %+v, %v", rep, err)
			}

			// The letter kept from before the replay names a message already replayed.
			again, err := c.Admin().ReplayDLQ(ctx, stale)
			switch p {
			case queentest.Profile015:
				if err != nil || again.Result != queen.ReplayDuplicate || !again.Removed || again.Moved {
					t.Fatalf("replay of a replayed letter: %+v, %v", again, err)
				}
			default:
				if !errors.Is(err, queen.ErrDeadLetterNotFound) {
					t.Fatalf("replay of a replayed letter: %+v, %v", again, err)
				}
			}

			want := make([]int, 100)
			for i := range want {
				want[i] = i
			}
			for _, g := range []string{"fresh", "audit"} {
				got := copiesByPartition(t, readAll(t, c, "hooks", g))
				for _, part := range []string{"c1", "c2"} {
					if fmt.Sprint(got[part]) != fmt.Sprint(want) {
						t.Fatalf("group %s, partition %s: copies %v, want 0..99 once each in order", g, part, got[part])
					}
				}
			}
		})
	}
}

// A message dead-lettered by two groups is replayed once: one copy reaches
// both, and both letters go.
func TestQueentestReplayDeadLettersOneCopyPerMessage(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			srv, c := newBroker(t, queentest.WithProfile(p))
			ctx := t.Context()
			deadLetterAll(t, c, "hooks", "sender", 1, "c1")
			for _, m := range popAll(t, c, "hooks", "audit") {
				s := []queen.Settlement{{Message: m, Status: queen.StatusDLQ, Error: "audit down"}}
				if _, err := c.SettleBatch(ctx, s, queen.AckOptions{ConsumerGroup: "audit"}); err != nil {
					t.Fatal(err)
				}
			}
			if n := srv.DLQCount("hooks"); n != 2 {
				t.Fatalf("%d letters, want one per group", n)
			}
			rep, err := c.Admin().ReplayDeadLetters(ctx, "hooks", queen.DLQListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Moved+rep.Duplicate != 2 || rep.Moved != 1 || rep.Removed != 2 {
				t.Fatalf("report %+v: want one letter moved, the other a duplicate, both removed", rep)
			}
			if n := srv.DLQCount("hooks"); n != 0 {
				t.Fatalf("%d letters left", n)
			}
			for _, g := range []string{"sender", "audit"} {
				if got := copiesByPartition(t, readAll(t, c, "hooks", g)); len(got["c1"]) != 1 {
					t.Fatalf("group %s got copies %v, want one", g, got)
				}
			}
		})
	}
}

// A client that does not know its broker is 0.15.1 yet tries the replay
// routes, learns the generation, and replays a letter named by its address
// alone; once it knows, it sends no replay route again.
func TestQueentest015ReplayByAddress(t *testing.T) {
	srv, c, clock := newBroker015(t)
	ctx := t.Context()
	msgs := deadLetter015(t, c, clock, "mail", "p1", "g", 2)

	paths := &pathLog{base: &http.Transport{}}
	t.Cleanup(paths.base.CloseIdleConnections)
	fresh, err := queen.New(srv.URL, queen.WithHTTPClient(&http.Client{Transport: paths}))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close(ctx)
	res, err := fresh.Admin().ReplayDLQ(ctx, queen.DeadLetter{PartitionID: msgs[0].PartitionID, TransactionID: msgs[0].TransactionID})
	if err != nil || !res.Moved || !res.Removed || res.Result != queen.ReplayMoved || res.Queue != "mail" || res.Partition != "p1" ||
		res.TransactionID != "dlq:"+msgs[0].TransactionID || res.OriginalTransactionID != msgs[0].TransactionID || res.MessageID == "" {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	retry := "POST /api/v1/messages/" + msgs[0].PartitionID + "/" + msgs[0].TransactionID + "/retry"
	if got := paths.take(); len(got) != 5 || got[0] != retry || got[1] != "GET /health" || !strings.HasPrefix(got[2], "GET /api/v1/messages/") ||
		got[3] != "POST /api/v1/push" || !strings.HasPrefix(got[4], "DELETE /api/v1/messages/") {
		t.Fatalf("requests %q: want the replay route, the generation, then read, push, delete", got)
	}
	if _, err := fresh.Admin().ReplayDLQ(ctx, queen.DeadLetter{PartitionID: msgs[1].PartitionID, TransactionID: msgs[1].TransactionID}); err != nil {
		t.Fatal(err)
	}
	if got := paths.take(); len(got) != 3 || !strings.HasPrefix(got[0], "GET ") {
		t.Fatalf("requests %q once the generation is known: want read, push, delete", got)
	}
	if n := srv.DLQCount("mail"); n != 0 {
		t.Fatalf("%d letters left", n)
	}
	got := readAll(t, c, "mail", "g")
	if len(got) != 2 || got[0].TransactionID != "dlq:"+msgs[0].TransactionID || string(got[0].Raw) != string(msgs[0].Raw) {
		t.Fatalf("group g read %v after the replays", payloads(got))
	}

	// A message that is not dead-lettered is no letter: nothing is pushed.
	live := mustPush(t, c, "mail", "p1", "live")[0]
	srv.ResetCounters()
	_, err = c.Admin().ReplayDLQ(ctx, queen.DeadLetter{PartitionID: live.PartitionID, TransactionID: live.TransactionID})
	if !errors.Is(err, queen.ErrDeadLetterNotFound) || srv.Requests(queentest.RoutePush) != 0 {
		t.Fatalf("replay of a live message: %v (%d pushes)", err, srv.Requests(queentest.RoutePush))
	}
}

// stub015 answers GET /health as a 0.15.1 broker and the other requests
// with answer.
func stub015(t *testing.T, answer func(stubReq) (int, string)) (*wireStub, *queen.Client) {
	t.Helper()
	stub, c := newWireStubFunc(t, func(r stubReq) (int, string) {
		if r.Path == "/health" {
			return 200, `{"status":"healthy","database":"connected","server":"C++ Queen Server (libqueen)","worker_id":1,"version":"1.0.0"}`
		}
		return answer(r)
	})
	stub.passHealth()
	return stub, c
}

// A 0.15.1 broker without the message delete route keeps the letter: the
// copy is stored once (ReplayKept, then ReplayDuplicate), the letter stays
// listed. The copy's transaction id is "dlq:" and the original's, or a
// hash of it where that would pass the 255 characters the broker stores.
func TestReplay015WithoutDeleteRouteKeepsTheLetter(t *testing.T) {
	const pid = "5bbcbea4-8c8f-41fe-855c-66ef47c23ba8"
	long := strings.Repeat("x", 252)
	for _, tc := range []struct{ txn, copyID string }{
		{"order-17", "dlq:order-17"},
		{long, "dlq:sha256:"},
	} {
		stored := false
		var pushed []string
		stub, c := stub015(t, func(r stubReq) (int, string) {
			switch {
			case r.Method == http.MethodGet && strings.HasPrefix(r.Path, "/api/v1/messages/"+pid+"/"):
				return 200, `{"id":"m1","transactionId":"` + tc.txn + `","partitionId":"` + pid + `","queue":"hooks","partition":"c1",
					"status":"dead_letter","payload":{"to":"a"},"consumerGroups":[{"name":"sender","consumed":true}]}`
			case r.Method == http.MethodPost && r.Path == "/api/v1/push":
				var body struct {
					Items []struct{ TransactionID string }
				}
				if err := json.Unmarshal(r.Body, &body); err != nil || len(body.Items) != 1 {
					t.Fatalf("push body %s", r.Body)
				}
				id := body.Items[0].TransactionID
				pushed = append(pushed, id)
				status := "queued"
				if stored {
					status = "duplicate"
				}
				stored = true
				return 201, `[{"index":0,"transaction_id":"` + id + `","status":"` + status + `","message_id":"m2","partition_id":"` + pid + `"}]`
			}
			return 404, `<html><body><h1>File Not Found</h1></body></html>`
		})
		dl := queen.DeadLetter{PartitionID: pid, TransactionID: tc.txn}
		for i, want := range []string{queen.ReplayKept, queen.ReplayDuplicate} {
			res, err := c.Admin().ReplayDLQ(t.Context(), dl)
			if err != nil || res.Result != want || res.Removed || res.Moved || res.Queue != "hooks" || res.Partition != "c1" {
				t.Fatalf("replay %d of %q: %+v, %v; want %s, letter listed", i+1, tc.txn, res, err, want)
			}
		}
		if len(pushed) != 2 || pushed[0] != pushed[1] || !strings.HasPrefix(pushed[0], tc.copyID) || len([]rune(pushed[0])) > 255 {
			t.Fatalf("copies pushed as %q, want the same id twice, %q..., at most 255 characters", pushed, tc.copyID)
		}
		var deletes int
		for _, r := range stub.requests() {
			if r.Method == http.MethodDelete {
				deletes++
			}
		}
		if deletes != 2 {
			t.Fatalf("%d deletes, want one per replay", deletes)
		}
	}
}

// DeleteDeadLetter removes a letter without replaying it; a letter already
// gone is no error. On 0.15.1, where that deletes the message, a message
// another group has not read yet is left alone.
func TestQueentestDeleteDeadLetter(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			srv, c := newBroker(t, queentest.WithProfile(p))
			ctx := t.Context()
			deadLetterAll(t, c, "hooks", "sender", 2, "c1")
			page, err := c.Admin().ListDLQ(ctx, "hooks", queen.DLQListOptions{})
			if err != nil || len(page.Messages) != 2 {
				t.Fatalf("list: %+v, %v", page, err)
			}
			dl := page.Messages[0]
			if _, err := c.Admin().DeleteDeadLetter(ctx, queen.DeadLetter{TransactionID: dl.TransactionID}); !errors.Is(err, queen.ErrInvalidArgument) {
				t.Fatalf("delete without a partition id: %v", err)
			}

			// audit reads the first message only: it has not read the second.
			first, err := c.Queue("hooks").Group("audit").SubscriptionMode(queen.SubscriptionModeAll).Batch(1).Wait(false).Pop(ctx)
			if err != nil || len(first) != 1 {
				t.Fatalf("audit's pop: %d messages, %v", len(first), err)
			}
			ackAll(t, c, first, "audit")
			// the second message's letter (letters of one failure time come
			// in no set order)
			dl = page.Messages[0]
			if dl.TransactionID == first[0].TransactionID {
				dl = page.Messages[1]
			}
			removed, err := c.Admin().DeleteDeadLetter(ctx, dl)
			if p == queentest.Profile015 {
				if !errors.Is(err, queen.ErrNotSupported) || removed || srv.DLQCount("hooks") != 2 {
					t.Fatalf("delete of a message audit has not read: %v, %v (%d letters)", removed, err, srv.DLQCount("hooks"))
				}
				readAll(t, c, "hooks", "audit")
				removed, err = c.Admin().DeleteDeadLetter(ctx, dl)
			}
			if err != nil || !removed || srv.DLQCount("hooks") != 1 {
				t.Fatalf("delete: %v, %v (%d letters left)", removed, err, srv.DLQCount("hooks"))
			}
			if removed, err := c.Admin().DeleteDeadLetter(ctx, dl); err != nil || removed {
				t.Fatalf("second delete: %v, %v", removed, err)
			}
			if _, err := c.Admin().ReplayDLQ(ctx, dl); !errors.Is(err, queen.ErrDeadLetterNotFound) {
				t.Fatalf("replay of a deleted letter: %v", err)
			}
		})
	}
}

// PurgeDLQ empties a queue's dead-letter queue, or one group's part of it,
// on 2.x; 0.15.1 has no purge, and once the client knows it sends none.
func TestQueentestPurgeDLQ(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			srv, c := newBroker(t, queentest.WithProfile(p))
			ctx := t.Context()
			deadLetterAll(t, c, "hooks", "sender", 3, "c1")
			var acks []queen.Settlement
			for _, m := range popAll(t, c, "hooks", "audit") {
				acks = append(acks, queen.Settlement{Message: m, Status: queen.StatusDLQ})
			}
			if _, err := c.SettleBatch(ctx, acks, queen.AckOptions{ConsumerGroup: "audit"}); err != nil || len(acks) != 3 {
				t.Fatalf("audit dead-letters %d: %v", len(acks), err)
			}
			if _, err := c.Admin().PurgeDLQ(ctx, "", ""); !errors.Is(err, queen.ErrEmptyQueue) {
				t.Fatalf("purge without a queue: %v", err)
			}
			n, err := c.Admin().PurgeDLQ(ctx, "hooks", "audit")
			if p == queentest.Profile015 {
				if !errors.Is(err, queen.ErrNotSupported) || srv.DLQCount("hooks") != 6 {
					t.Fatalf("purge on 0.15.1: %d, %v", n, err)
				}
				if _, err := c.Admin().ListDLQ(ctx, "hooks", queen.DLQListOptions{}); err != nil { // learns the generation
					t.Fatal(err)
				}
				srv.ResetCounters()
				if _, err := c.Admin().PurgeDLQ(ctx, "hooks", ""); !errors.Is(err, queen.ErrNotSupported) || srv.Requests(queentest.RouteDLQ) != 0 {
					t.Fatalf("purge known unsupported: %v (%d requests)", err, srv.Requests(queentest.RouteDLQ))
				}
				return
			}
			if err != nil || n != 3 || srv.DLQCount("hooks") != 3 {
				t.Fatalf("purge of audit's letters: %d, %v (%d left)", n, err, srv.DLQCount("hooks"))
			}
			if n, err := c.Admin().PurgeDLQ(ctx, "hooks", ""); err != nil || n != 3 || srv.DLQCount("hooks") != 0 {
				t.Fatalf("purge: %d, %v (%d left)", n, err, srv.DLQCount("hooks"))
			}
		})
	}
}

// pathLog is an http.RoundTripper that notes "METHOD PATH" of each request.
type pathLog struct {
	base *http.Transport
	mu   sync.Mutex
	seen []string
}

func (p *pathLog) RoundTrip(r *http.Request) (*http.Response, error) {
	p.mu.Lock()
	p.seen = append(p.seen, r.Method+" "+r.URL.EscapedPath())
	p.mu.Unlock()
	return p.base.RoundTrip(r)
}

// take returns the requests noted since the last take.
func (p *pathLog) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.seen
	p.seen = nil
	return out
}

// A 0.15.1 broker lists letters newest failure first, to the millisecond,
// in no set order among equal times (one batch ack dead-letters a whole
// pop at once), and shows the message's creation to the millisecond too.
// The replay then orders a partition's letters by message id, the
// broker's own order among messages created together (time-ordered UUIDv7
// ids), so that the copies keep the partition's order.
func TestReplayDeadLetters015OrdersTiesByMessageID(t *testing.T) {
	const pid = "5bbcbea4-8c8f-41fe-855c-66ef47c23ba8"
	ids := []string{"01a2352e-ef94-7000-ae01-000000000001", "01a2352e-ef94-7001-ae01-000000000002", "01a2352e-ef94-7002-ae01-000000000003"}
	entry := func(i int) string {
		return fmt.Sprintf(`{"id":%q,"transactionId":"t%d","partitionId":%q,"queue":"hooks","partition":"c1","consumerGroup":"g","errorMessage":"x","retryCount":0,"data":{"n":%d},"producerSub":null,"createdAt":"2026-12-02T05:16:38.176Z","failedAt":"2026-12-02T05:16:46.332Z"}`, ids[i], i, pid, i)
	}
	var pushed []string
	_, c := stub015(t, func(r stubReq) (int, string) {
		switch {
		case r.Method == http.MethodGet && r.Path == "/api/v1/dlq":
			return 200, `{"messages":[` + entry(1) + `,` + entry(2) + `,` + entry(0) + `],"pagination":{"limit":100,"offset":0}}`
		case r.Method == http.MethodGet:
			txn := r.Path[strings.LastIndex(r.Path, "/")+1:]
			return 200, `{"id":"m","transactionId":"` + txn + `","partitionId":"` + pid + `","queue":"hooks","partition":"c1","status":"dead_letter","payload":{}}`
		case r.Method == http.MethodPost:
			var body struct {
				Items []struct{ TransactionID string }
			}
			_ = json.Unmarshal(r.Body, &body)
			pushed = append(pushed, body.Items[0].TransactionID)
			return 201, `[{"index":0,"transaction_id":"` + body.Items[0].TransactionID + `","status":"queued","message_id":"c"}]`
		}
		return 200, `{"success":true,"message":"Message deleted successfully"}`
	})
	rep, err := c.Admin().ReplayDeadLetters(t.Context(), "hooks", queen.DLQListOptions{})
	if err != nil || rep.Moved != 3 {
		t.Fatalf("replay: %+v, %v", rep, err)
	}
	if fmt.Sprint(pushed) != "[dlq:t0 dlq:t1 dlq:t2]" {
		t.Fatalf("copies pushed in the order %v, want the messages' order t0, t1, t2", pushed)
	}
}

// On 0.15.1 a message's view lists only the groups with a position on its
// partition: a group of the queue that never read that partition (here
// audit, which read c2 only, and queue mode, likewise) is not in it, and
// deleting the message would lose it to them. DeleteDeadLetter refuses and
// deletes nothing; audit then reads the message.
func TestQueentest015DeleteDeadLetterKeepsAMessageAGroupNeverReachedOnItsPartition(t *testing.T) {
	for _, reader := range []string{"audit", ""} {
		t.Run(cmpLabel(reader), func(t *testing.T) {
			srv, c, _ := newBroker015(t)
			ctx := t.Context()
			mustPush(t, c, "hooks", "c2", "two")
			q := c.Queue("hooks").Partition("c2").Batch(1).Wait(false)
			if reader != "" {
				q = q.Group(reader).SubscriptionMode(queen.SubscriptionModeAll)
			}
			got, err := q.Pop(ctx)
			if err != nil || len(got) != 1 {
				t.Fatalf("%s's pop of c2: %d messages, %v", cmpLabel(reader), len(got), err)
			}
			if _, err := c.SettleBatch(ctx, []queen.Settlement{{Message: got[0], Status: queen.StatusCompleted}}, queen.AckOptions{ConsumerGroup: reader}); err != nil {
				t.Fatal(err)
			}
			mustPush(t, c, "hooks", "c1", "one")
			sent, err := c.Queue("hooks").Partition("c1").Group("sender").SubscriptionMode(queen.SubscriptionModeAll).Batch(1).Wait(false).Pop(ctx)
			if err != nil || len(sent) != 1 {
				t.Fatalf("sender's pop of c1: %d messages, %v", len(sent), err)
			}
			if _, err := c.SettleBatch(ctx, []queen.Settlement{{Message: sent[0], Status: queen.StatusDLQ, Error: "down"}}, queen.AckOptions{ConsumerGroup: "sender"}); err != nil {
				t.Fatal(err)
			}
			page, err := c.Admin().ListDLQ(ctx, "hooks", queen.DLQListOptions{})
			if err != nil || len(page.Messages) != 1 {
				t.Fatalf("list: %+v, %v", page, err)
			}
			removed, err := c.Admin().DeleteDeadLetter(ctx, page.Messages[0])
			if !errors.Is(err, queen.ErrNotSupported) || removed || srv.DLQCount("hooks") != 1 {
				t.Fatalf("delete of a message %s never reached: %v, %v (%d letters)", cmpLabel(reader), removed, err, srv.DLQCount("hooks"))
			}
			q = c.Queue("hooks").Partition("c1").Batch(1).Wait(false)
			if reader != "" {
				q = q.Group(reader).SubscriptionMode(queen.SubscriptionModeAll)
			}
			if got, err := q.Pop(ctx); err != nil || len(got) != 1 || string(got[0].Raw) != `"one"` {
				t.Fatalf("%s's pop of c1 after the refused delete: %v, %v", cmpLabel(reader), payloads(got), err)
			}
		})
	}
}

func cmpLabel(group string) string {
	if group == "" {
		return "queue mode"
	}
	return group
}
