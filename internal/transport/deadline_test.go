package transport

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDeadlinesShareWithinSlack(t *testing.T) {
	var d Deadlines
	defer d.Close()
	parent := context.Background()
	now := time.Now()
	at := now.Add(30 * time.Second)

	ctx1, l1 := d.Get(parent, at, now)
	ctx2, l2 := d.Get(parent, at.Add(maxSlack), now.Add(maxSlack))
	assert.Same(t, ctx1, ctx2, "a deadline at most the slack later shares the context")
	dl, ok := ctx2.Deadline()
	require.True(t, ok)
	assert.True(t, dl.Equal(at), "the shared deadline is the earlier one: never late")

	ctx3, l3 := d.Get(parent, at.Add(maxSlack+time.Millisecond), now.Add(maxSlack+time.Millisecond))
	assert.NotSame(t, ctx1, ctx3, "past the slack: a new context")
	dl3, _ := ctx3.Deadline()
	assert.True(t, dl3.Equal(at.Add(maxSlack+time.Millisecond)))

	ctx4, l4 := d.Get(parent, at.Add(-time.Millisecond), now)
	assert.NotSame(t, ctx3, ctx4, "an earlier deadline than the shared one: its own context")

	// The replaced context ends when its last user releases it, not before.
	l1.Release()
	assert.NoError(t, ctx1.Err(), "still used")
	l2.Release()
	assert.ErrorIs(t, ctx1.Err(), context.Canceled, "replaced and unused: cancelled, its timer released")
	l3.Release()
	l4.Release()
	assert.NoError(t, ctx4.Err(), "the current context stays for the next request")
}

func TestDeadlinesSlackIsOnePercentOfShortDeadlines(t *testing.T) {
	var d Deadlines
	defer d.Close()
	now := time.Now()
	at := now.Add(100 * time.Millisecond) // slack 1 ms
	ctx1, l1 := d.Get(context.Background(), at, now)
	defer l1.Release()
	ctx2, l2 := d.Get(context.Background(), at.Add(time.Millisecond), now.Add(time.Millisecond))
	defer l2.Release()
	assert.Same(t, ctx1, ctx2)
	ctx3, l3 := d.Get(context.Background(), at.Add(2*time.Millisecond), now.Add(2*time.Millisecond))
	defer l3.Release()
	assert.NotSame(t, ctx1, ctx3)
}

func TestDeadlinesByParent(t *testing.T) {
	var d Deadlines
	defer d.Close()
	now := time.Now()
	at := now.Add(time.Second)
	type key struct{}
	p1 := context.WithValue(context.Background(), key{}, 1)
	p2 := context.WithValue(context.Background(), key{}, 2)
	c1, l1 := d.Get(p1, at, now)
	c2, l2 := d.Get(p2, at, now)
	defer l1.Release()
	defer l2.Release()
	assert.NotSame(t, c1, c2)
	assert.Equal(t, 1, c1.Value(key{}), "the parent's values")
	assert.Equal(t, 2, c2.Value(key{}))

	// A cancelled parent's context is not handed out again.
	p3, cancel := context.WithCancel(context.Background())
	c3, l3 := d.Get(p3, at, now)
	cancel()
	l3.Release()
	assert.ErrorIs(t, c3.Err(), context.Canceled)
	p4 := p3
	c4, l4 := d.Get(p4, at, now)
	defer l4.Release()
	assert.NotSame(t, c3, c4)
}

func TestDeadlinesEnd(t *testing.T) {
	var d Deadlines
	defer d.Close()
	now := time.Now()
	ctx, l := d.Get(context.Background(), now.Add(20*time.Millisecond), now)
	defer l.Release()
	select {
	case <-ctx.Done():
		assert.True(t, errors.Is(ctx.Err(), context.DeadlineExceeded))
	case <-time.After(5 * time.Second):
		t.Fatal("the deadline did not end the context")
	}
}

func TestDeadlinesManyParentsReuseSlots(t *testing.T) {
	var d Deadlines
	defer d.Close()
	now := time.Now()
	var first context.Context
	for i := range 3 * deadlineSlots {
		p, cancel := context.WithCancel(context.Background())
		ctx, l := d.Get(p, now.Add(time.Minute), now)
		if i == 0 {
			first = ctx
		}
		l.Release()
		cancel()
	}
	assert.ErrorIs(t, first.Err(), context.Canceled)
	n := 0
	for _, s := range d.slots {
		if s != nil {
			n++
		}
	}
	assert.Equal(t, deadlineSlots, n, "no more contexts kept than slots")
}

func TestDeadlinesClose(t *testing.T) {
	var d Deadlines
	now := time.Now()
	at := now.Add(time.Minute)
	idle, l1 := d.Get(context.Background(), at, now)
	l1.Release()
	used, l2 := d.Get(context.WithValue(context.Background(), struct{}{}, 1), at, now)
	d.Close()
	assert.ErrorIs(t, idle.Err(), context.Canceled, "Close cancels what nobody uses")
	assert.NoError(t, used.Err(), "and leaves a context in use to its request")
	l2.Release()
	assert.ErrorIs(t, used.Err(), context.Canceled, "until it is released")

	after, l3 := d.Get(context.Background(), at, now)
	after2, l4 := d.Get(context.Background(), at, now)
	assert.NotSame(t, after, after2, "after Close nothing is shared")
	l3.Release()
	l4.Release()
	assert.ErrorIs(t, after.Err(), context.Canceled)
	assert.ErrorIs(t, after2.Err(), context.Canceled)
}

func TestNilDeadlines(t *testing.T) {
	var d *Deadlines
	now := time.Now()
	ctx, l := d.Get(context.Background(), now.Add(time.Minute), now)
	dl, ok := ctx.Deadline()
	require.True(t, ok)
	assert.True(t, dl.Equal(now.Add(time.Minute)))
	l.Release()
	assert.ErrorIs(t, ctx.Err(), context.Canceled)
	Deadline{}.Release() // a zero Deadline does nothing
}
