package transport

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
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
	assert.NoError(t, ctx3.Err(), "the current context stays for the next request")
	l4.Release()
	assert.ErrorIs(t, ctx4.Err(), context.Canceled, "a context of its own ends with its request")
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
	c4, l4 := d.Get(p3, at, now)
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
	type key struct{}
	var ctxs []context.Context
	for i := range deadlineSlots + 2 {
		p := context.WithValue(context.Background(), key{}, i)
		ctx, l := d.Get(p, now.Add(time.Minute), now)
		l.Release()
		ctxs = append(ctxs, ctx)
	}
	// Slots are taken in turn once all are used: the first two went, and
	// nobody used them, so they were cancelled.
	assert.ErrorIs(t, ctxs[0].Err(), context.Canceled)
	assert.ErrorIs(t, ctxs[1].Err(), context.Canceled)
	for _, ctx := range ctxs[2:] {
		assert.NoError(t, ctx.Err())
	}

	// A slot whose context ended (its parent was cancelled) is taken
	// before a live one.
	p, cancel := context.WithCancel(context.Background())
	dead, l := d.Get(p, now.Add(time.Minute), now)
	l.Release()
	cancel()
	require.ErrorIs(t, dead.Err(), context.Canceled)
	_, l = d.Get(context.WithValue(context.Background(), key{}, "new"), now.Add(time.Minute), now)
	l.Release()
	for _, ctx := range ctxs[3:] {
		assert.NoError(t, ctx.Err(), "live slots are kept")
	}
	for _, s := range d.slots {
		assert.NotSame(t, p, s.parent, "the dead slot was reused")
	}
}

// A context in use is never cancelled by its replacement, nor by Close.
func TestDeadlinesInUseOutlivesItsSlot(t *testing.T) {
	var d Deadlines
	now := time.Now()
	type key struct{}
	used, l := d.Get(context.WithValue(context.Background(), key{}, 0), now.Add(time.Minute), now)
	for i := 1; i <= 2*deadlineSlots; i++ {
		_, li := d.Get(context.WithValue(context.Background(), key{}, i), now.Add(time.Minute), now)
		li.Release()
	}
	d.Close()
	assert.NoError(t, used.Err())
	l.Release()
	assert.ErrorIs(t, used.Err(), context.Canceled)
}

// An earlier deadline than the parent's shared one gets a context of its
// own and leaves the shared one in place.
func TestDeadlinesEarlierDoesNotEvict(t *testing.T) {
	var d Deadlines
	defer d.Close()
	p, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Now()
	shared1, l1 := d.Get(p, now.Add(time.Minute), now)
	l1.Release()
	early, l2 := d.Get(p, now.Add(time.Second), now)
	assert.NotSame(t, shared1, early)
	dl, _ := early.Deadline()
	assert.True(t, dl.Equal(now.Add(time.Second)))
	l2.Release()
	assert.ErrorIs(t, early.Err(), context.Canceled, "not shared: cancelled at once")
	again, l3 := d.Get(p, now.Add(time.Minute), now)
	l3.Release()
	assert.Same(t, shared1, again)
}

// uncomparable is a ctx of a type == cannot compare (it panics).
type uncomparable struct {
	context.Context
	tags []string
}

func TestDeadlinesUncomparableParent(t *testing.T) {
	var d Deadlines
	defer d.Close()
	now := time.Now()
	p := uncomparable{Context: context.Background(), tags: []string{"a"}}
	for range 3 {
		ctx, l := d.Get(p, now.Add(time.Minute), now)
		assert.NoError(t, ctx.Err())
		l.Release()
		assert.ErrorIs(t, ctx.Err(), context.Canceled, "its own context, ended with its request")
	}
	// Shared parents beside it are compared with it without a panic.
	bg, l := d.Get(context.Background(), now.Add(time.Minute), now)
	l.Release()
	ctx, l := d.Get(p, now.Add(time.Minute), now)
	l.Release()
	assert.NotSame(t, bg, ctx)
}

// Many goroutines get and release under a few parents: no context is
// cancelled while in use (run with -race).
func TestDeadlinesConcurrent(t *testing.T) {
	var d Deadlines
	defer d.Close()
	type key struct{}
	parents := make([]context.Context, deadlineSlots+3)
	for i := range parents {
		parents[i] = context.WithValue(context.Background(), key{}, i)
	}
	var wg sync.WaitGroup
	var bad atomic.Int32
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				now := time.Now()
				ctx, l := d.Get(parents[(g+i)%len(parents)], now.Add(time.Minute), now)
				if ctx.Err() != nil {
					bad.Add(1)
				}
				l.Release()
			}
		})
	}
	wg.Wait()
	assert.Zero(t, bad.Load(), "a context handed out was already cancelled")
}

// inUseKey marks a context derived from the one Get returned.
type inUseKey struct{}

func TestDeadlinesClose(t *testing.T) {
	var d Deadlines
	now := time.Now()
	at := now.Add(time.Minute)
	idle, l1 := d.Get(context.Background(), at, now)
	l1.Release()
	used, l2 := d.Get(context.WithValue(context.Background(), inUseKey{}, 1), at, now)
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
