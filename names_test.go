package queen

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// badNames are refused wherever a queue, partition or group name goes, with
// the rule each breaks named in the error.
var badNames = []struct{ name, rule string }{
	{" ", "only white space"},
	{"\t ", "only white space"},
	{".", "relative path segment"},
	{"..", "relative path segment"},
	{"../etc", "'/'"},
	{"a/b", "'/'"},
	{"a\x00b", "control character"},
	{"a\nb", "control character"},
	{"a\x7fb", "control character"},
	{"a\xffb", "UTF-8"},
	{strings.Repeat("q", 300), "more than the 223 allowed"},
	{strings.Repeat("q", MaxNameBytes+1), "more than the 223 allowed"},
}

// nameCall is one operation given a name in one of its places.
type nameCall struct {
	name string
	call func(c *Client, name string) error
}

func nameCalls() []nameCall {
	ctx := context.Background()
	h := func(context.Context, *Message) error { return nil }
	seekTo := SeekConsumerGroupOptions{ToEnd: true}
	return []nameCall{
		{"pop queue", func(c *Client, n string) error { _, err := c.Queue(n).Pop(ctx); return err }},
		{"pop partition", func(c *Client, n string) error { _, err := c.Queue("q").Partition(n).Pop(ctx); return err }},
		{"pop group", func(c *Client, n string) error { _, err := c.Queue("q").Group(n).Pop(ctx); return err }},
		{"consume queue", func(c *Client, n string) error { return c.Queue(n).Consume(ctx, h).Execute(ctx) }},
		{"consume group", func(c *Client, n string) error { return c.Queue("q").Group(n).Consume(ctx, h).Execute(ctx) }},
		{"push queue", func(c *Client, n string) error { _, err := c.Queue(n).Push(1).Execute(ctx); return err }},
		{"push partition", func(c *Client, n string) error {
			_, err := c.Queue("q").Partition(n).Push(1).Execute(ctx)
			return err
		}},
		{"create", func(c *Client, n string) error { _, err := c.Queue(n).Create().Execute(ctx); return err }},
		{"delete", func(c *Client, n string) error { _, err := c.Queue(n).Delete().Execute(ctx); return err }},
		{"fetch queue", func(c *Client, n string) error { _, err := c.Queue(n).Fetch(ctx, []string{"p"}); return err }},
		{"fetch partition", func(c *Client, n string) error { _, err := c.Queue("q").Fetch(ctx, []string{"p", n}); return err }},
		{"seek group", func(c *Client, n string) error {
			_, err := c.Admin().SeekConsumerGroup(ctx, n, "q", seekTo)
			return err
		}},
		{"seek queue", func(c *Client, n string) error {
			_, err := c.Admin().SeekConsumerGroup(ctx, "g", n, seekTo)
			return err
		}},
		{"seek partition", func(c *Client, n string) error {
			_, err := c.Admin().SeekPartition(ctx, "g", "q", n, seekTo)
			return err
		}},
		{"group detail", func(c *Client, n string) error { _, err := c.Admin().GetConsumerGroup(ctx, n); return err }},
		{"group delete", func(c *Client, n string) error {
			_, err := c.Admin().DeleteConsumerGroup(ctx, n, DeleteConsumerGroupOptions{})
			return err
		}},
		{"group delete on a queue", func(c *Client, n string) error {
			_, err := c.Admin().DeleteConsumerGroup(ctx, "g", DeleteConsumerGroupOptions{Queue: n})
			return err
		}},
		{"queue detail", func(c *Client, n string) error { _, err := c.Admin().GetQueue(ctx, n); return err }},
		{"dlq list", func(c *Client, n string) error { _, err := c.Admin().ListDLQ(ctx, n, DLQListOptions{}); return err }},
		{"ack group", func(c *Client, n string) error {
			m := &Message{TransactionID: "t", PartitionID: "1", LeaseID: "l"}
			_, err := c.Ack(ctx, m, true, AckOptions{ConsumerGroup: n})
			return err
		}},
		{"transaction push queue", func(c *Client, n string) error {
			_, err := c.Transaction().Queue(n).Push(1).Commit(ctx)
			return err
		}},
		{"transaction push partition", func(c *Client, n string) error {
			_, err := c.Transaction().Queue("q").Partition(n).Push(1).Commit(ctx)
			return err
		}},
	}
}

// A name that could mean another path, or that no broker stores, is
// refused before any request, in every place a name goes, naming the rule
// and the name.
func TestBadNamesAreRefusedBeforeTheWire(t *testing.T) {
	for _, nc := range nameCalls() {
		t.Run(nc.name, func(t *testing.T) {
			rec, c := newRecorder(t)
			for _, bad := range badNames {
				err := nc.call(c, bad.name)
				require.Error(t, err, "name %q", bad.name)
				assert.ErrorIs(t, err, ErrInvalidName, "name %q", bad.name)
				assert.ErrorIs(t, err, ErrInvalidArgument, "name %q", bad.name)
				assert.Contains(t, err.Error(), bad.rule, "name %q", bad.name)
				assert.Contains(t, err.Error(), fmt.Sprintf("%q", shorten(bad.name)), "the error names the value")
			}
			assert.Zero(t, rec.hits(), "nothing may be sent")
		})
	}
}

// The longest name allowed goes out, escaped; one byte more does not.
func TestNameLengthBoundary(t *testing.T) {
	rec, c := newRecorder(t)
	longest := strings.Repeat("é", MaxNameBytes/2) + "q" // 223 bytes of UTF-8, 112 characters
	require.Len(t, longest, MaxNameBytes)
	_, err := c.Queue(longest).Group(longest).Wait(false).Pop(context.Background())
	require.NoError(t, err)
	r := rec.only(t)
	assert.Equal(t, "/api/v1/pop/queue/"+escape(longest), r.Path)
	assert.Equal(t, longest, r.Query.Get("consumerGroup"))

	_, err = c.Queue(longest + "q").Wait(false).Pop(context.Background())
	assert.ErrorIs(t, err, ErrInvalidName)
	assert.Equal(t, 1, rec.hits())
}

// Names with spaces inside, dots that are not a whole segment, and other
// reserved bytes are valid and only ever mean themselves on the path.
func TestOddButValidNamesAreEscaped(t *testing.T) {
	rec, c := newRecorder(t, answer{status: http.StatusOK, body: `{"success":true,"partitionsUpdated":1}`})
	_, err := c.Admin().SeekPartition(context.Background(), "a b", "...", ".x?#%", SeekConsumerGroupOptions{ToEnd: true, CreateIfMissing: true})
	require.NoError(t, err)
	assert.Equal(t, "/api/v1/consumer-groups/a%20b/queues/.../partitions/.x%3F%23%25/seek", rec.only(t).Path)
}

// escape never lets a segment be read as "." or "..", and escapes '/'.
func TestEscapeKeepsASegmentItself(t *testing.T) {
	for in, want := range map[string]string{
		".": "%2E", "..": "%2E%2E", "...": "...", "a/b": "a%2Fb", "a b": "a%20b", "x": "x", "%2E": "%252E",
	} {
		assert.Equal(t, want, escape(in), "escape(%q)", in)
	}
}

// An empty name where one is required keeps its own sentinel.
func TestEmptyNamesKeepTheirSentinels(t *testing.T) {
	rec, c := newRecorder(t)
	ctx := context.Background()
	_, err := c.Queue("").Push(1).Execute(ctx)
	assert.ErrorIs(t, err, ErrEmptyQueue)
	_, err = c.Admin().SeekConsumerGroup(ctx, "", "q", SeekConsumerGroupOptions{ToEnd: true})
	assert.ErrorIs(t, err, ErrEmptyGroup)
	_, err = c.Admin().SeekPartition(ctx, "g", "q", "", SeekConsumerGroupOptions{ToEnd: true})
	assert.ErrorIs(t, err, ErrEmptyPartition)
	assert.Zero(t, rec.hits())
}

// An id from elsewhere that is "." or ".." (a lease id, a dead letter's
// id) reaches the broker as %2E or %2E%2E, never as a path segment that a
// server or proxy would resolve.
func TestDotIDsStayThemselvesOnTheWire(t *testing.T) {
	rec, c := newRecorder(t, answer{status: http.StatusOK, body: `{"success":true,"leaseId":"..","newExpiresAt":"2026-10-22T00:00:00Z"}`})
	_, _ = c.Renew(context.Background(), &Message{TransactionID: "t", PartitionID: "1", LeaseID: ".."})
	assert.Equal(t, "/api/v1/lease/%2E%2E/extend", rec.only(t).Path)
}
