package queen_test

// Builders are values: a setter returns a changed copy, so a builder a user
// kept never changes and every operation reads the builder it was called on.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func builderBroker(t *testing.T) (*queen.Client, context.Context) {
	t.Helper()
	srv := queentest.Start(t)
	client, err := queen.New(srv.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return client, ctx
}

// partitionPayloads pops, without waiting, what partition holds for queue
// mode and returns the payloads as strings.
func partitionPayloads(t *testing.T, ctx context.Context, client *queen.Client, queue, partition string) []string {
	t.Helper()
	msgs, err := client.Queue(queue).Partition(partition).Batch(100).Wait(false).Pop(ctx)
	require.NoError(t, err)
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Raw)
	}
	return out
}

// A push builder made from q pinned to "a" stays on "a" when q is pinned to
// "b" later: the later call makes a new builder and changes nothing kept.
func TestKeptPushBuilderKeepsItsPartition(t *testing.T) {
	client, ctx := builderBroker(t)

	q := client.Queue("alias-1")
	pb := q.Partition("a").Push(map[string]int{"x": 1})
	_ = q.Partition("b") // a new builder, dropped: q and pb are as they were
	_, err := pb.Execute(ctx)
	require.NoError(t, err)

	assert.Equal(t, []string{`{"x":1}`}, partitionPayloads(t, ctx, client, "alias-1", "a"))
	assert.Empty(t, partitionPayloads(t, ctx, client, "alias-1", "b"))
	assert.Equal(t, "queue=alias-1", q.String(), "q is not pinned")
}

// Two builders made from one base are two builders: each pops its own
// partition, and the base names none.
func TestBuildersFromOneBaseAreIndependent(t *testing.T) {
	client, ctx := builderBroker(t)
	_, err := client.Queue("orders").Partition("p1").Push("one").Execute(ctx)
	require.NoError(t, err)
	_, err = client.Queue("orders").Partition("p2").Push("two").Execute(ctx)
	require.NoError(t, err)

	base := client.Queue("orders")
	a := base.Partition("p1")
	b := base.Partition("p2")
	require.NotSame(t, a, b)

	msgs, err := a.Wait(false).Pop(ctx)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, `"one"`, string(msgs[0].Raw), "a pops p1")
	assert.Equal(t, "p1", msgs[0].Partition)

	msgs, err = b.Wait(false).Pop(ctx)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.Equal(t, `"two"`, string(msgs[0].Raw), "b pops p2")
	assert.Equal(t, "queue=orders", base.String())
}

// A web service keeps one builder per queue and pins it per request from
// many goroutines at once: every message lands in its own partition, and
// -race finds nothing.
func TestSharedQueueBuilderConcurrentPushes(t *testing.T) {
	client, ctx := builderBroker(t)
	q := client.Queue("shared")

	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = q.Partition(fmt.Sprintf("customer-%d", i)).Push(map[string]int{"customer": i}).Execute(ctx)
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "push %d", i)
	}
	for i := range n {
		got := partitionPayloads(t, ctx, client, "shared", fmt.Sprintf("customer-%d", i))
		assert.Equal(t, []string{fmt.Sprintf(`{"customer":%d}`, i)}, got, "partition customer-%d", i)
	}
}

// One PushBuilder executed from two goroutines at once sends one set of
// transaction ids: the broker stores the message once.
func TestPushBuilderExecutedConcurrentlyStoresOnce(t *testing.T) {
	client, ctx := builderBroker(t)
	pb := client.Queue("twice").Partition("p").Push("m1", "m2")

	var wg sync.WaitGroup
	res := make([][]queen.PushResult, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() { res[i], errs[i] = pb.Execute(ctx) })
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	for j := range 2 {
		assert.Equal(t, res[0][j].TransactionID, res[1][j].TransactionID, "message %d", j)
	}
	assert.Equal(t, []string{`"m1"`, `"m2"`}, partitionPayloads(t, ctx, client, "twice", "p"))
}

// The transaction ids are made by Push: builders derived from one Push
// (another trace id, say) send the same ones, and a later Push makes new
// ones.
func TestPushMintsTransactionIDs(t *testing.T) {
	client, ctx := builderBroker(t)
	pb := client.Queue("ids").Push("m")
	traced := pb.TraceID("0194f1a2-0000-7000-8000-000000000001")

	first, err := pb.Execute(ctx)
	require.NoError(t, err)
	again, err := traced.Execute(ctx)
	require.NoError(t, err)
	assert.Equal(t, first[0].TransactionID, again[0].TransactionID)
	assert.Equal(t, queen.PushDuplicate, again[0].Status)

	other, err := client.Queue("ids").Push("m").Execute(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, first[0].TransactionID, other[0].TransactionID)
	assert.Equal(t, queen.PushQueued, other[0].Status)
}

// The ids given to TransactionIDs are copied: changing the caller's slice
// afterwards changes nothing sent.
func TestTransactionIDsAreCopied(t *testing.T) {
	client, ctx := builderBroker(t)
	ids := []string{"tx-1", "tx-2"}
	pb := client.Queue("copied").Push("a", "b").TransactionIDs(ids...)
	ids[0] = "changed"

	res, err := pb.Execute(ctx)
	require.NoError(t, err)
	assert.Equal(t, "tx-1", res[0].TransactionID)
	assert.Equal(t, "tx-2", res[1].TransactionID)
}

// A transaction's push view is a value too: two pushes made from one kept
// view go to their own partitions. The transaction itself accumulates.
func TestTransactionPushViewIsAValue(t *testing.T) {
	client, ctx := builderBroker(t)
	tx := client.Transaction()
	view := tx.Queue("txq")
	a := view.Partition("a")
	b := view.Partition("b")
	a.Push("to a")
	b.Push("to b")
	_ = view.Partition("c") // a new view, dropped

	res, err := tx.Commit(ctx)
	require.NoError(t, err)
	require.True(t, res.Committed)
	assert.Equal(t, []string{`"to a"`}, partitionPayloads(t, ctx, client, "txq", "a"))
	assert.Equal(t, []string{`"to b"`}, partitionPayloads(t, ctx, client, "txq", "b"))
	assert.Empty(t, partitionPayloads(t, ctx, client, "txq", "c"))
}

// A kept CreateBuilder does not become a replace when Replace is called on
// it: the replacing builder is another one.
func TestKeptCreateBuilderIsNotReplaced(t *testing.T) {
	client, ctx := builderBroker(t)
	_, err := client.Queue("cfg").Config(queen.QueueConfig{RetryLimit: queen.Ptr(7)}).Create().Execute(ctx)
	require.NoError(t, err)

	merge := client.Queue("cfg").Config(queen.QueueConfig{Priority: queen.Ptr(2)}).Create()
	_ = merge.Replace() // a new builder, dropped
	info, err := merge.Execute(ctx)
	require.NoError(t, err)
	require.NotNil(t, info.Config.RetryLimit)
	assert.Equal(t, 7, *info.Config.RetryLimit, "a merge keeps RetryLimit")
}
