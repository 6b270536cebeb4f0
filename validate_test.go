package queen

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A later call of a setter replaces an earlier one, a bad value included.
func TestLaterOptionReplacesEarlier(t *testing.T) {
	rec, c := newRecorder(t)
	ctx := context.Background()
	_, err := c.Queue("q").Concurrency(0).Concurrency(2).Batch(100000).Batch(10).Wait(false).Pop(ctx)
	require.NoError(t, err)
	assert.Equal(t, "10", rec.only(t).Query.Get("batch"))

	h := func(context.Context, *Message) error { return nil }
	err = c.Queue("q").Concurrency(0).Concurrency(2).Limit(-1).Limit(0).IdleMillis(-1).IdleMillis(1).
		RenewLease(true, 5).RenewLease(true, MinRenewMillis).Wait(false).Consume(ctx, h).Execute(ctx)
	require.NoError(t, err, "the loop stops when idle")
	assert.Positive(t, rec.hits()-1, "the loop popped")
}

// An option a Pop does not use never breaks it; the consume loop, which
// uses it, refuses it before any request.
func TestConsumeOnlyOptionsNeverBreakAPop(t *testing.T) {
	ctx := context.Background()
	h := func(context.Context, *Message) error { return nil }
	for name, set := range map[string]func(*QueueBuilder) *QueueBuilder{
		"Concurrency(0)":       func(b *QueueBuilder) *QueueBuilder { return b.Concurrency(0) },
		"Concurrency(-3)":      func(b *QueueBuilder) *QueueBuilder { return b.Concurrency(-3) },
		"Limit(-1)":            func(b *QueueBuilder) *QueueBuilder { return b.Limit(-1) },
		"IdleMillis(-1)":       func(b *QueueBuilder) *QueueBuilder { return b.IdleMillis(-1) },
		"RenewLease(true, 5)":  func(b *QueueBuilder) *QueueBuilder { return b.RenewLease(true, 5) },
		"RenewLease(true, 0)":  func(b *QueueBuilder) *QueueBuilder { return b.RenewLease(true, 0) },
		"RenewLease(true, -1)": func(b *QueueBuilder) *QueueBuilder { return b.RenewLease(true, -1) },
	} {
		t.Run(name, func(t *testing.T) {
			rec, c := newRecorder(t)
			_, err := set(c.Queue("q")).Wait(false).Pop(ctx)
			require.NoError(t, err)
			assert.Equal(t, 1, rec.hits())

			err = set(c.Queue("q")).Wait(false).Consume(ctx, h).Execute(ctx)
			assert.ErrorIs(t, err, ErrInvalidOption)
			assert.ErrorIs(t, err, ErrInvalidArgument)
			assert.Equal(t, 1, rec.hits(), "the loop sent nothing")
		})
	}
}

// RenewLease(false, ms) turns renewal off; its interval is not checked.
func TestRenewLeaseOffIsNotChecked(t *testing.T) {
	_, c := newRecorder(t)
	ctx := context.Background()
	err := c.Queue("q").RenewLease(false, 5).Wait(false).IdleMillis(1).
		Consume(ctx, func(context.Context, *Message) error { return nil }).Execute(ctx)
	require.NoError(t, err)
}

// The bounds of the pop options, named in the error.
func TestPopBounds(t *testing.T) {
	ctx := context.Background()
	rec, c := newRecorder(t)
	_, err := c.Queue("q").Batch(MaxBatch).Partitions(MaxPartitions).Wait(false).Pop(ctx)
	require.NoError(t, err)
	assert.Equal(t, "10000", rec.only(t).Query.Get("batch"))

	for _, b := range []*QueueBuilder{
		c.Queue("q").Batch(MaxBatch + 1),
		c.Queue("q").Batch(100000),
	} {
		_, err := b.Pop(ctx)
		assert.ErrorIs(t, err, ErrInvalidOption)
		assert.ErrorContains(t, err, "MaxBatch (10000)")
		err = b.Consume(ctx, func(context.Context, *Message) error { return nil }).Execute(ctx)
		assert.ErrorIs(t, err, ErrInvalidOption)
	}
	_, err = c.Queue("q").Partitions(MaxPartitions + 1).Pop(ctx)
	assert.ErrorIs(t, err, ErrPartitionsOutOfRange)
	_, err = c.Queue("q").Partitions(0).Pop(ctx)
	assert.ErrorIs(t, err, ErrPartitionsOutOfRange)
	_, err = c.Queue("q").TimeoutMillis(MaxTimeoutMillis + 1).Pop(ctx)
	assert.ErrorIs(t, err, ErrTimeoutOutOfRange)
	_, err = c.Queue("q").TimeoutMillis(-1).Pop(ctx)
	assert.ErrorIs(t, err, ErrTimeoutOutOfRange)
	assert.Equal(t, 1, rec.hits())
}

// A renewal interval under MinRenewMillis is refused by the loop.
func TestRenewIntervalBound(t *testing.T) {
	rec, c := newRecorder(t)
	ctx := context.Background()
	err := c.Queue("q").RenewLease(true, MinRenewMillis-1).Consume(ctx, func(context.Context, *Message) error { return nil }).Execute(ctx)
	assert.ErrorIs(t, err, ErrInvalidOption)
	assert.ErrorContains(t, err, "MinRenewMillis (250)")
	assert.Zero(t, rec.hits())
}

// Pop and consume options never break a push, a create or a fetch.
func TestOtherOperationsIgnorePopOptions(t *testing.T) {
	ctx := context.Background()
	rec, c := newRecorder(t,
		answer{status: http.StatusCreated, body: `[{"index":0,"status":"queued","transactionId":"t"}]`},
		answer{status: http.StatusOK, body: `{"configured":true,"queue":"q","options":{}}`},
	)
	bad := func() *QueueBuilder {
		return c.Queue("q").Batch(100000).Partitions(0).TimeoutMillis(-1).Concurrency(0).Limit(-1).
			RenewLease(true, 1).Group("a/b").Conflation(true).CommitOnDelivery(true).SubscriptionMode("later")
	}
	_, err := bad().Push(1).Execute(ctx)
	require.NoError(t, err)
	_, err = bad().Create().Execute(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, rec.hits())
}

// A broker URL that url.Parse tolerates but that is not a clean absolute
// http(s) URL is refused.
func TestNewRefusesUncleanURLs(t *testing.T) {
	for _, u := range []string{
		" http://x", "http://x ", "\thttp://x", "http://x\n", "http://x/\x00", "http:x", "http:///x", "x:6632",
		"ftp://x", "http://x?y=1", "http://x#f", "http://u:p@x", "", "http://x/a/../b", "http://x/./b", "http://x//b",
	} {
		_, err := New(u)
		assert.ErrorIs(t, err, ErrInvalidURL, "New(%q)", u)
		assert.ErrorIs(t, err, ErrInvalidArgument, "New(%q)", u)
	}
	for _, u := range []string{"http://x", "https://x:6632/", "http://127.0.0.1:6632", "http://x/prefix"} {
		c, err := New(u)
		if assert.NoError(t, err, "New(%q)", u) {
			_ = c.Close(context.Background())
		}
	}
}
