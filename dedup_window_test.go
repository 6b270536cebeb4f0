package queen_test

import (
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// A push executed again keeps its transaction ids: inside the queue's dedup
// window the broker answers the repeat duplicate; once the window has
// passed it stores a second copy (2.x, PROTOCOL.md §19). What PushBuilder's
// Execute promises is bounded by that window.
func TestPushExecuteAgainIsSafeOnlyInsideTheDedupWindow(t *testing.T) {
	clock := queentest.NewFakeClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	_, c := newBroker(t, queentest.WithClock(clock))
	if _, err := c.Queue("orders").Config(queen.QueueConfig{DedupWindow: queen.Ptr(time.Minute)}).Create().Execute(t.Context()); err != nil {
		t.Fatal(err)
	}
	p := c.Queue("orders").Push(map[string]int{"n": 1})
	first, err := p.Execute(t.Context())
	if err != nil || first[0].Status != queen.PushQueued {
		t.Fatalf("first send: %+v, %v", first, err)
	}
	clock.Advance(59 * time.Second)
	again, err := p.Execute(t.Context())
	if err != nil || again[0].Status != queen.PushDuplicate || again[0].MessageID != first[0].MessageID {
		t.Fatalf("inside the window: %+v, %v; want a duplicate of %s", again, err, first[0].MessageID)
	}
	clock.Advance(2 * time.Second)
	late, err := p.Execute(t.Context())
	if err != nil || late[0].Status != queen.PushQueued || late[0].MessageID == first[0].MessageID {
		t.Fatalf("after the window: %+v, %v; want a second stored copy", late, err)
	}
}
