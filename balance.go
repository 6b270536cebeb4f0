package queen

import (
	"cmp"
	"fmt"

	"github.com/queen-go/queen/internal/transport"
	"github.com/queen-go/queen/internal/wire"
)

// LoadBalancing is how a client with several broker URLs (WithURLs)
// spreads its calls over them. Whatever the choice, a URL that fails (a
// network error or a 5xx) rests for RetryPolicy.FailoverPause, the call
// is retried on another URL, and the client probes nothing: a resting URL
// gets calls again once its pause is over.
type LoadBalancing int

const (
	// Affinity, the default, sends each call to the URL that owns its key
	// on a consistent-hash ring (128 points per URL): the pops, acks and
	// renewals of one queue and consumer group (and partition, for a pop
	// that names one) meet on one URL, where the broker can serve their
	// long polls together; pushes spread by queue and partition (a request
	// of several, such as a producer's batch, a transaction or a
	// SettleBatch, by its first item); other calls go round robin. While
	// a URL rests only its keys move to the others, and they come back
	// after the pause.
	Affinity LoadBalancing = iota + 1
	// RoundRobin sends each call to the next URL that is not resting.
	RoundRobin
	// InOrder sends every call to the first URL that is not resting, in
	// the order given to New and WithURLs: a primary, then standbys.
	InOrder
)

// String returns "affinity", "round-robin" or "in-order".
func (b LoadBalancing) String() string {
	switch b {
	case Affinity:
		return "affinity"
	case RoundRobin:
		return "round-robin"
	case InOrder:
		return "in-order"
	}
	return fmt.Sprintf("LoadBalancing(%d)", int(b))
}

// WithLoadBalancing sets how calls spread over several broker URLs
// (default Affinity). A value other than Affinity, RoundRobin and InOrder
// makes New fail with ErrInvalidOption.
func WithLoadBalancing(b LoadBalancing) Option {
	return func(c *config) { c.balancing, c.balancingSet = b, true }
}

// balance returns the transport's balance for the client's choice.
func (cfg *config) balance() (transport.Balance, error) {
	if !cfg.balancingSet {
		return transport.Affinity, nil
	}
	switch cfg.balancing {
	case Affinity:
		return transport.Affinity, nil
	case RoundRobin:
		return transport.RoundRobin, nil
	case InOrder:
		return transport.Failover, nil
	}
	return 0, fmt.Errorf("%w: unknown load balancing %s", ErrInvalidOption, cfg.balancing)
}

// popKey is the routing key of the pops, acks and renewals of queue and
// group: "queue:partition:group", partition "*" for a pop that names none,
// group "__QUEUE_MODE__" in queue mode.
func popKey(queue, partition, group string) string {
	return queue + ":" + cmp.Or(partition, "*") + ":" + cmp.Or(group, wire.QueueModeGroup)
}

// discoverKey is the queue place of a discovery pop's key: its namespace,
// "*" when it names none.
func discoverKey(namespace string) string { return cmp.Or(namespace, "*") }

// pushKey is the routing key of a push to queue and partition.
func pushKey(queue, partition string) string {
	return queue + ":" + partition
}

// ackKey is the routing key of the settlement or renewal of m for group
// (empty: m's own): the key of the pop that delivered m, or, for a message
// the client did not pop, that of a pop of m's queue and group.
func ackKey(m *Message, group string) string {
	if m.route != "" && (group == "" || group == messageGroup(m)) {
		return m.route
	}
	return popKey(m.Queue, "", cmp.Or(group, m.ConsumerGroup))
}
