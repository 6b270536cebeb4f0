package wire

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRoutePath(t *testing.T) {
	assert.Equal(t, "/api/v1/push", RoutePush.Path())
	assert.Equal(t, "/api/v1/pop/queue/a%2Fb", RoutePopQueue.Path("a/b"))
	assert.Equal(t, "/api/v1/pop/queue/q%20x/partition/%2E%2E", RoutePopPartition.Path("q x", ".."))
	assert.Equal(t, "/api/v1/consumer-groups/g/queues/%2E/partitions/p%3Fx/seek", RouteSeekPartition.Path("g", ".", "p?x"))
	assert.Equal(t, "/api/v1/messages/pid/t%23x/retry", RouteMessageRetry.Path("pid", "t#x"))
	assert.Panics(t, func() { RouteQueue.Path() })
	assert.Panics(t, func() { RouteQueue.Path("a", "b") })
	assert.Panics(t, func() { RoutePush.Path("a") })
}

func TestRouteMatch(t *testing.T) {
	segs := func(p string) []string { return strings.Split(strings.TrimPrefix(p, "/"), "/") }
	params, ok := RouteSeekPartition.Match(segs(RouteSeekPartition.Path("g", "q", "p")))
	assert.True(t, ok)
	assert.Equal(t, []string{"g", "q", "p"}, params)
	params, ok = RoutePush.Match(segs("/api/v1/push"))
	assert.True(t, ok)
	assert.Empty(t, params)
	_, ok = RoutePopQueue.Match(segs("/api/v1/pop/queue"))
	assert.False(t, ok)
	_, ok = RoutePopQueue.Match(segs("/api/v1/pop/queue/q/partition"))
	assert.False(t, ok)
	_, ok = RouteAck.Match(segs("/api/v1/ack/batch"))
	assert.False(t, ok)
}

func TestRouteOf(t *testing.T) {
	for _, r := range routes {
		n := strings.Count(string(r), "{")
		params := make([]string, n)
		for i := range params {
			params[i] = "x/y"
		}
		got, ok := RouteOf(r.Path(params...))
		assert.True(t, ok, r)
		assert.Equal(t, r, got)
	}
	got, ok := RouteOf("/api/v1/consumer-groups/lagging")
	assert.True(t, ok)
	assert.Equal(t, RouteGroupsLagging, got)
	_, ok = RouteOf("/api/v1/unknown/route")
	assert.False(t, ok)
}
