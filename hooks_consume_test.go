package queen

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConsumeCallsHooks runs a consume loop with hooks: the handler gets
// the ctx OnHandlerStart derived, each message has its HandlerEnd with
// its outcome, and the pop's settlement and pops are reported.
func TestConsumeCallsHooks(t *testing.T) {
	rec := &recHook{}
	_, c := hookClient(t, nil, ctxHook{}, rec)
	_, err := c.Queue("work").Push(1, 2, 3).Execute(t.Context())
	require.NoError(t, err)

	errBad := errors.New("bad")
	var seen []any
	err = c.Queue("work").Group("g").SubscriptionMode(SubscriptionModeAll).Batch(3).Each().Limit(3).
		Consume(t.Context(), func(ctx context.Context, m *Message) error {
			seen = append(seen, ctx.Value(ctxKey{}))
			if string(m.Raw) == "3" {
				return errBad
			}
			return nil
		}).
		OnError(func(ctx context.Context, m *Message, err error) Outcome { return DLQ(err) }).
		Execute(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []any{"ctxHook", "ctxHook", "ctxHook"}, seen)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.starts, 3)
	require.Len(t, rec.ends, 3)
	for i, e := range rec.ends {
		assert.Equal(t, "work", e.Queue)
		assert.Equal(t, "g", e.Group)
		require.Len(t, e.Messages, 1)
		assert.Equal(t, rec.starts[i].Messages, e.Messages)
		assert.False(t, e.LeaseLost)
	}
	assert.Equal(t, []Outcome{Complete()}, rec.ends[0].Outcomes)
	assert.Equal(t, []Outcome{Complete()}, rec.ends[1].Outcomes)
	assert.Equal(t, []Outcome{DLQ(errBad)}, rec.ends[2].Outcomes)
	assert.Equal(t, errBad, rec.ends[2].Err)

	require.Len(t, rec.settle, 1)
	s := rec.settle[0]
	assert.Equal(t, "g", s.Group)
	assert.Equal(t, 2, s.Count(StatusCompleted))
	assert.Equal(t, 1, s.Count(StatusDLQ))
	assert.NoError(t, s.Err)

	require.NotEmpty(t, rec.pop)
	assert.Equal(t, "work", rec.pop[0].Queue)
	assert.Equal(t, "g", rec.pop[0].Group)
	assert.Len(t, rec.pop[0].Messages, 3)
}

// TestConsumeBatchCallsHooks: a batch handler is one handler call with
// the whole pop and one outcome per message.
func TestConsumeBatchCallsHooks(t *testing.T) {
	rec := &recHook{}
	_, c := hookClient(t, nil, rec)
	_, err := c.Queue("batch").Push(1, 2).Execute(t.Context())
	require.NoError(t, err)
	err = c.Queue("batch").Group("g").SubscriptionMode(SubscriptionModeAll).Batch(2).Limit(2).
		ConsumeBatch(t.Context(), func(ctx context.Context, msgs []*Message) error { return nil }).
		Execute(t.Context())
	require.NoError(t, err)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.ends, 1)
	assert.Len(t, rec.ends[0].Messages, 2)
	assert.Equal(t, []Outcome{Complete(), Complete()}, rec.ends[0].Outcomes)
	require.Len(t, rec.settle, 1)
	assert.Equal(t, 2, rec.settle[0].Count(StatusCompleted))
}
