package queen_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

// Data's numbers are float64 (2^53 + 1 arrives as 2^53); Decode[T] and Raw
// keep the exact integer, through Pop and through a consume loop alike.
func TestExactIntegersThroughDecodeAndRaw(t *testing.T) {
	srv := queentest.Start(t)
	c, err := queen.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const big = 9007199254740993 // 2^53 + 1: not a float64
	if _, err := c.Queue("q").Push(json.RawMessage(`{"id":9007199254740993}`), json.RawMessage(`{"id":9007199254740993}`)).Execute(ctx); err != nil {
		t.Fatal(err)
	}
	check := func(how string, m *queen.Message) {
		t.Helper()
		if got := m.Data["id"]; got != float64(9007199254740992) {
			t.Errorf("%s: Data[id] = %v (%T), want the float64 9.007199254740992e+15 that Message.Data documents", how, got, got)
		}
		asInt, err := queen.Decode[struct {
			ID int64 `json:"id"`
		}](m)
		if err != nil || asInt.ID != big {
			t.Errorf("%s: Decode into int64 = %d, %v; want %d", how, asInt.ID, err, int64(big))
		}
		asNum, err := queen.Decode[struct {
			ID json.Number `json:"id"`
		}](m)
		if err != nil || asNum.ID != "9007199254740993" {
			t.Errorf("%s: Decode into json.Number = %q, %v", how, asNum.ID, err)
		}
		if !strings.Contains(string(m.Raw), "9007199254740993") {
			t.Errorf("%s: Raw = %s, want the exact integer", how, m.Raw)
		}
	}
	msgs, err := c.Queue("q").Batch(1).Wait(false).Pop(ctx)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("Pop = %d messages, %v", len(msgs), err)
	}
	check("Pop", msgs[0])
	if _, err := c.Ack(ctx, msgs[0], true, queen.AckOptions{}); err != nil {
		t.Fatal(err)
	}
	err = c.Queue("q").Batch(1).Limit(1).Consume(ctx, func(_ context.Context, m *queen.Message) error {
		check("Consume", m)
		return nil
	}).Execute(ctx)
	if err != nil {
		t.Fatal(err)
	}
}
