package queen

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
)

// A pop's ack settles its whole lease: outcomes in message order, the
// messages after a failure (and those never started) as retry; a message
// its handler acked itself is left out.
func TestSettleOutcomesWholeLease(t *testing.T) {
	m := func(k string) *Message { return &Message{TransactionID: k} }
	a0, a1, a2, b0, b1, c0 := m("a/0"), m("a/1"), m("a/2"), m("b/0"), m("b/1"), m("c/0")
	b := &batch{msgs: []*Message{a0, a1, a2, b0, b1, c0}}
	b.groups = []*group{
		{b: b, msgs: []*Message{a0, a1, a2}, next: 2, acks: []Settlement{
			{Message: a0, Status: StatusCompleted}, {Message: a1, Status: StatusFailed, Error: "boom"}}},
		{b: b, msgs: []*Message{b0, b1}, next: 2, acks: []Settlement{{Message: b1, Status: StatusCompleted}}}, // b/0 acked by its handler
		{b: b, msgs: []*Message{c0}}, // never started
	}
	var got []string
	for _, s := range b.outcomes() {
		got = append(got, s.Message.TransactionID+":"+string(s.Status)+":"+s.Error)
	}
	want := []string{"a/0:completed:", "a/1:failed:boom", "a/2:retry:", "b/1:completed:", "c/0:retry:"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
}

// An ack that fails on the way is sent again until it goes through; one
// the broker refuses item by item is not; each failure reaches the hook.
func TestSettleRetriesTransientOnly(t *testing.T) {
	for _, tc := range []struct {
		name  string
		errs  []error
		sends int
	}{
		{"503 then network", []error{&BrokerError{Status: 503}, errors.New("connection reset")}, 3},
		{"refused items", []error{&AckError{Results: []AckResult{{TransactionID: "p/0", Error: "invalid lease"}}}}, 1},
		{"400", []error{&BrokerError{Status: 400}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeBroker(10)
			f.add("p", 1)
			f.setErrs = tc.errs
			var hooked atomic.Int32
			e, logs := testEngine(t, context.Background(), f, engineConfig{each: true}, 1,
				func(context.Context, *Message) error { return nil })
			e.on.onLoopError = func(_ context.Context, err error) {
				var le *LoopError
				if errors.As(err, &le) && le.Op == LoopOpSettle && le.Messages == 1 {
					hooked.Add(1)
				}
			}
			if err := runEngine(t, e); err != nil {
				t.Fatal(err)
			}
			if n := len(f.settles()); n != tc.sends {
				t.Fatalf("%d ack requests, want %d", n, tc.sends)
			}
			if int(hooked.Load()) != len(tc.errs) {
				t.Fatalf("hook got %d settle failures, want %d", hooked.Load(), len(tc.errs))
			}
			if out := logs.String(); !strings.Contains(out, "level=WARN") && !strings.Contains(out, "level=ERROR") {
				t.Fatalf("settle failure not logged:\n%s", logs.String())
			}
		})
	}
}
