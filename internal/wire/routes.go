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

// APIPrefix is the path every route of the broker's API but RouteHealth
// starts with.
const APIPrefix = "/api/v1"

// Routes of the broker's HTTP API (2.x; 0.15.1 lacks some, see
// Generation.Serves).
const (
	// RoutePush is POST: store messages (PushRequest, answer []PushResult).
	RoutePush Route = APIPrefix + "/push"
	// RouteTransaction is POST: pushes and acks applied atomically (TxnRequest, TxnResponse).
	RouteTransaction Route = APIPrefix + "/transaction"
	// RouteHealth is GET: the broker's health (HealthResponse); outside APIPrefix.
	RouteHealth Route = "/health"

	// RoutePopQueue is GET: a pop from any partition of a queue (PopQuery, PopResponse).
	RoutePopQueue Route = APIPrefix + "/pop/queue/{queue}"
	// RoutePopPartition is GET: a pop from one partition.
	RoutePopPartition Route = APIPrefix + "/pop/queue/{queue}/partition/{partition}"
	// RoutePopDiscover is GET: a pop from the queues of a namespace and task (2.x).
	RoutePopDiscover Route = APIPrefix + "/pop"

	// RouteAck is POST: one acknowledgment (AckRequest, answer []AckResult).
	RouteAck Route = APIPrefix + "/ack"
	// RouteAckBatch is POST: several acknowledgments (AckBatchRequest).
	RouteAckBatch Route = APIPrefix + "/ack/batch"
	// RouteLeaseExtend is POST: extend a lease (RenewRequest, RenewResponse).
	RouteLeaseExtend Route = APIPrefix + "/lease/{leaseId}/extend"

	// RouteConfigure is POST: create or configure a queue (ConfigureRequest).
	RouteConfigure Route = APIPrefix + "/configure"
	// RouteQueues is GET: the queue list.
	RouteQueues Route = APIPrefix + "/resources/queues"
	// RouteQueue is GET: one queue's detail; DELETE: delete the queue.
	RouteQueue Route = APIPrefix + "/resources/queues/{queue}"
	// RouteQueueDepth is GET: a queue's depth for a group (2.x).
	RouteQueueDepth Route = APIPrefix + "/resources/queues/{queue}/depth"

	// RouteGroups is GET: the consumer-group rows (ConsumerGroupRow).
	RouteGroups Route = APIPrefix + "/consumer-groups"
	// RouteGroupsLagging is GET: the groups lagging by at least minLagSeconds.
	RouteGroupsLagging Route = APIPrefix + "/consumer-groups/lagging"
	// RouteGroup is GET: a group's detail (GroupDetail); DELETE: delete the group.
	RouteGroup Route = APIPrefix + "/consumer-groups/{group}"
	// RouteGroupQueue is DELETE: delete a group's position on one queue.
	RouteGroupQueue Route = APIPrefix + "/consumer-groups/{group}/queues/{queue}"
	// RouteGroupSubscription is POST: set a group's subscription.
	RouteGroupSubscription Route = APIPrefix + "/consumer-groups/{group}/subscription"
	// RouteSeekGroup is POST: move a group's cursors on a queue (SeekRequest, SeekResponse).
	RouteSeekGroup Route = APIPrefix + "/consumer-groups/{group}/queues/{queue}/seek"
	// RouteSeekPartition is POST: move a group's cursor on one partition.
	RouteSeekPartition Route = APIPrefix + "/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek"

	// RouteDLQ is GET: list dead-lettered messages (DLQQuery, DLQListResponse); DELETE: purge them (2.x).
	RouteDLQ Route = APIPrefix + "/dlq"
	// RouteDLQReplay is POST: replay a dead-lettered message by its row id (DLQMoveResponse; 2.x).
	RouteDLQReplay Route = APIPrefix + "/dlq/{id}/replay"
	// RouteMessage is GET: one message with its queue's configuration
	// (queueConfig; 0.15.1 has it); DELETE: delete the message and its
	// dead letters (0.15.1), or only its dead letters (2.x).
	RouteMessage Route = APIPrefix + "/messages/{partitionId}/{transactionId}"
	// RouteMessageRetry is POST: replay a dead-lettered message by its address (2.x).
	RouteMessageRetry Route = APIPrefix + "/messages/{partitionId}/{transactionId}/retry"

	// RouteFetch is POST: read partitions by offset (FetchRequest, FetchResponse; 2.x).
	RouteFetch Route = APIPrefix + "/fetch"
	// RouteStatsRefresh is POST: refresh the statistics (a no-op on 2.x).
	RouteStatsRefresh Route = APIPrefix + "/stats/refresh"
)

// routes lists every Route above, literal routes before the parameterised
// ones that could match the same path (RouteGroupsLagging before
// RouteGroup), so that RouteOf finds the most specific.
var routes = [...]Route{
	RoutePush, RouteTransaction, RouteHealth,
	RoutePopQueue, RoutePopPartition, RoutePopDiscover,
	RouteAck, RouteAckBatch, RouteLeaseExtend,
	RouteConfigure, RouteQueues, RouteQueue, RouteQueueDepth,
	RouteGroups, RouteGroupsLagging, RouteGroup, RouteGroupQueue, RouteGroupSubscription,
	RouteSeekGroup, RouteSeekPartition,
	RouteDLQ, RouteDLQReplay, RouteMessage, RouteMessageRetry,
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
// included), and false when it is none of the routes above. A parameter matches any
// one segment: a name in a path is escaped, so it is one segment.
func RouteOf(escapedPath string) (Route, bool) {
	segs := strings.Split(strings.TrimPrefix(escapedPath, "/"), "/")
	for _, r := range routes {
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
