package wire

import (
	"fmt"
	"net/url"
	"strings"
)

// Route is the path template of one route of the broker's HTTP API, such
// as "/api/v1/pop/queue/{queue}": literal segments, and parameters written
// {name}, each of which is exactly one path segment. A Route builds the
// escaped path of a request (Path), recognises one (Match), and names the
// route for metrics (its string).
type Route string

// Routes of the broker's HTTP API (2.x; 0.15.1 lacks some, see
// Generation).
const (
	RoutePush        Route = "/api/v1/push"
	RouteTransaction Route = "/api/v1/transaction"
	RouteHealth      Route = "/health"

	RoutePopQueue     Route = "/api/v1/pop/queue/{queue}"
	RoutePopPartition Route = "/api/v1/pop/queue/{queue}/partition/{partition}"
	RoutePopDiscover  Route = "/api/v1/pop"

	RouteAck         Route = "/api/v1/ack"
	RouteAckBatch    Route = "/api/v1/ack/batch"
	RouteLeaseExtend Route = "/api/v1/lease/{leaseId}/extend"

	RouteConfigure  Route = "/api/v1/configure"
	RouteQueues     Route = "/api/v1/resources/queues"
	RouteQueue      Route = "/api/v1/resources/queues/{queue}"
	RouteQueueDepth Route = "/api/v1/resources/queues/{queue}/depth"

	RouteGroups            Route = "/api/v1/consumer-groups"
	RouteGroupsLagging     Route = "/api/v1/consumer-groups/lagging"
	RouteGroup             Route = "/api/v1/consumer-groups/{group}"
	RouteGroupQueue        Route = "/api/v1/consumer-groups/{group}/queues/{queue}"
	RouteGroupSubscription Route = "/api/v1/consumer-groups/{group}/subscription"
	RouteSeekGroup         Route = "/api/v1/consumer-groups/{group}/queues/{queue}/seek"
	RouteSeekPartition     Route = "/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek"

	RouteDLQ          Route = "/api/v1/dlq"
	RouteDLQReplay    Route = "/api/v1/dlq/{id}/replay"
	RouteMessageRetry Route = "/api/v1/messages/{partitionId}/{transactionId}/retry"

	RouteFetch        Route = "/api/v1/fetch"
	RouteStatsRefresh Route = "/api/v1/stats/refresh"
)

// Routes lists every Route above, literal routes before the parameterised
// ones that could match the same path (RouteGroupsLagging before
// RouteGroup), so that RouteOf finds the most specific.
var Routes = []Route{
	RoutePush, RouteTransaction, RouteHealth,
	RoutePopQueue, RoutePopPartition, RoutePopDiscover,
	RouteAck, RouteAckBatch, RouteLeaseExtend,
	RouteConfigure, RouteQueues, RouteQueue, RouteQueueDepth,
	RouteGroups, RouteGroupsLagging, RouteGroup, RouteGroupQueue, RouteGroupSubscription,
	RouteSeekGroup, RouteSeekPartition,
	RouteDLQ, RouteDLQReplay, RouteMessageRetry,
	RouteFetch, RouteStatsRefresh,
}

// String returns the template.
func (r Route) String() string { return string(r) }

// Path returns the escaped path of r with params in place of its
// parameters, in order, each escaped as one segment (Segment). It panics
// when the number of params is not the number of parameters: a
// programming error, not input.
func (r Route) Path(params ...string) string {
	t := string(r)
	if len(params) == 0 && !strings.Contains(t, "{") {
		return t
	}
	var b strings.Builder
	b.Grow(len(t) + 16*len(params))
	i := 0
	for t != "" {
		open := strings.IndexByte(t, '{')
		if open < 0 {
			b.WriteString(t)
			break
		}
		end := strings.IndexByte(t[open:], '}')
		b.WriteString(t[:open])
		if i >= len(params) {
			panic(fmt.Sprintf("wire: route %s: %d path parameters given", r, len(params)))
		}
		b.WriteString(Segment(params[i]))
		i++
		t = t[open+end+1:]
	}
	if i != len(params) {
		panic(fmt.Sprintf("wire: route %s: %d path parameters given", r, len(params)))
	}
	return b.String()
}

// Match reports whether segs, the segments of a request path (the path
// without its leading "/", split on "/", unescaped or not as the caller
// decides), are r's, and returns the segments that stand for r's
// parameters, in order.
func (r Route) Match(segs []string) ([]string, bool) {
	t := strings.TrimPrefix(string(r), "/")
	var params []string
	for i := 0; ; i++ {
		lit, rest, more := strings.Cut(t, "/")
		if i >= len(segs) {
			return nil, false
		}
		if strings.HasPrefix(lit, "{") {
			params = append(params, segs[i])
		} else if lit != segs[i] {
			return nil, false
		}
		if !more {
			if i != len(segs)-1 {
				return nil, false
			}
			return params, true
		}
		t = rest
	}
}

// RouteOf returns the Route of an escaped request path (leading "/"
// included), and false when it is none of Routes. A parameter matches any
// one segment: a name in a path is escaped, so it is one segment.
func RouteOf(escapedPath string) (Route, bool) {
	segs := strings.Split(strings.TrimPrefix(escapedPath, "/"), "/")
	for _, r := range Routes {
		if _, ok := r.Match(segs); ok {
			return r, true
		}
	}
	return "", false
}

// Segment escapes one path segment so that it only ever means itself: '/'
// and the other reserved bytes are percent-encoded by url.PathEscape, and
// the segments "." and "..", which url.PathEscape leaves as they are and a
// server or proxy that cleans paths would resolve, are sent as %2E and
// %2E%2E.
func Segment(s string) string {
	switch s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	return url.PathEscape(s)
}
