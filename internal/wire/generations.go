package wire

import (
	"slices"
	"time"
)

// Generation says, feature by feature, what one generation of the broker
// does on the wire (PROTOCOL.md §11, §13, §16, §17): the one place where
// 2.x and 0.15.1 differ. The client reads it where its behaviour depends
// on the generation, and queentest serves its profiles by it. Get one with
// Gen2x, Gen015 or GenerationOf.
type Generation struct {
	// Name is the generation's name: "2.x" or "0.15.1".
	Name string

	// Engine is what GET /health says in "engine": "raft" on 2.x, absent
	// on 0.15.1 (which reports a fixed version "1.0.0" and a "database"
	// field instead). GenerationOf tells the generations apart by it.
	Engine string

	// lacks are the endpoints the generation does not have: they answer
	// 404 (0.15.1: with uWebSockets' HTML page). See Serves.
	lacks []Endpoint

	// RawPathParams: the broker hands path parameters to its routes
	// without unescaping them (0.15.1, uWebSockets), so a name that needs
	// percent-escaping in a path never matches the stored name.
	RawPathParams bool

	// ErrorsAs200: a request that reached the store answers HTTP 200
	// whatever its outcome, a failure as {"success":false,"error"}
	// (0.15.1); 2.x answers a real status and {"error","code"}.
	ErrorsAs200 bool

	// DefaultPopBatch is the batch of a pop that sends none and does not
	// ask for autopilot: 200 on 2.x, 1 on 0.15.1.
	DefaultPopBatch int

	// Autopilot: the broker sizes a pop that asks for autopilot and echoes
	// the sizes it chose (PopResponse.Autopilot). 0.15.1 ignores autopilot
	// (a pop without a batch then gets DefaultPopBatch).
	Autopilot bool

	// Conflation: the broker honours conflation and echoes it on every
	// answer with a body (PopResponse.Conflation); 0.15.1 ignores it.
	Conflation bool

	// LeaseSeconds: the broker honours a pop's leaseSeconds; 0.15.1 always
	// takes the queue's lease time.
	LeaseSeconds bool

	// EmptyPopErrors are the errors of a success:false pop answer that mean
	// "no messages", not a failure (0.15.1; 2.x answers 204).
	EmptyPopErrors []string

	// MessagePositions: pop messages carry offset and deliveryAttempt
	// (2.x); 0.15.1 messages have neither, and a UUID partitionId.
	MessagePositions bool

	// DefaultSubscriptionMode is where a group that names no start point
	// starts: "new" on 2.x, "" (everything) on 0.15.1.
	DefaultSubscriptionMode string

	// SubscriptionOnEveryPop: the broker applies subscriptionMode and
	// subscriptionFrom on every pop that reaches a partition where the
	// group's cursor is at its start and no stored start time covers it,
	// not only on the pop that registers the group: on 0.15.1 a
	// subscriptionMode=new pop there moves that cursor to the partition's
	// end (§16), so the client sends the start point only until the group
	// is registered (a start time excepted). 2.x keeps the start point of
	// the pop that registered the group (a queue-wide or discovery pop; a
	// pinned pop registers nothing and starts only its partition, by the
	// start point it carries) and ignores what later pops carry, so the
	// client sends it on every pop.
	SubscriptionOnEveryPop bool

	// RenewArray: a lease extension answers an array of
	// {index, leaseId, success, error, expiresAt} (0.15.1) instead of the
	// 2.x object RenewResponse.
	RenewArray bool

	// SeekAtOrBefore: a seek to a time places the cursor on the last
	// message created at or before it (0.15.1), so that messages created
	// at exactly that time are skipped; 2.x places it just before the
	// first message at or after it. SeekPrecision is the precision of the
	// broker's timestamps, which the client subtracts to read everything
	// at or after the time on such a broker.
	SeekAtOrBefore bool

	// PartitionSeekBody: a per-partition seek honours its body (toEnd or
	// timestamp; 2.x). 0.15.1 ignores it and always seeks the partition to
	// its end.
	PartitionSeekBody bool

	// ConfigureMerge: configure merges the options sent into the queue's
	// (2.x; mode "replace" replaces them); 0.15.1 always replaces.
	ConfigureMerge bool

	// DLQTotal: the DLQ list answers "total" (2.x); 0.15.1 answers only
	// {messages, pagination}.
	DLQTotal bool

	// DLQFilters: the client sends partition, from and to on the DLQ list
	// (2.x; the 2.2-era broker reads only queue and consumerGroup, like
	// 0.15.1, so the client also filters what comes back).
	DLQFilters bool

	// DLQPaging: the DLQ list honours limit and offset (2.x). On 0.15.1
	// the limit never cuts the list and an offset of 1 or more answers
	// {"success":true,"value":null}.
	DLQPaging bool

	// DLQRowIDs: a DLQ entry's id is the dead-letter row's own, and
	// createdAt its filing time (2.x). On 0.15.1 there is no row id: id is
	// the message's, createdAt the message's creation.
	DLQRowIDs bool

	// PinnedStartInMemory: a pinned pop of a group the broker has not
	// registered, carrying subscriptionMode=new or subscriptionFrom=now,
	// starts its partition at the tail and keeps that start only in memory
	// until something is delivered (2.x rsm/consume/load.rs seed,
	// pop.rs pop_pinned): it is taken again at the tail when the partition
	// did not exist yet, after a restart or leader change (mod.rs reset),
	// and when a queue-wide pop registers the group (load.rs register). A
	// fixed subscriptionFrom time is stable. 0.15.1 stores the start in
	// PostgreSQL (PROTOCOL.md §18).
	PinnedStartInMemory bool

	// DLQReplay: dead letters can be replayed (2.x: POST
	// /api/v1/dlq/{id}/replay and /api/v1/messages/{pid}/{txid}/retry);
	// 0.15.1 has neither route.
	DLQReplay bool
}

// SeekPrecision is the precision of the broker's timestamps (PostgreSQL's
// and the 2.x store's).
const SeekPrecision = time.Microsecond

// Endpoint is a method on a route.
type Endpoint struct {
	Method string
	Route  Route
}

// Gen2x is the 2.x broker (Rust, replicated log).
func Gen2x() Generation {
	return Generation{
		Name:   "2.x",
		Engine: "raft",
		// The message view and DELETE of a message (its dead-letter rows
		// only) are served by 2.2-era phase2/reads.rs api_dynamic.
		DefaultPopBatch:         200,
		Autopilot:               true,
		Conflation:              true,
		LeaseSeconds:            true,
		MessagePositions:        true,
		DefaultSubscriptionMode: "new",
		PinnedStartInMemory:     true,
		PartitionSeekBody:       true,
		ConfigureMerge:          true,
		DLQTotal:                true,
		DLQFilters:              true,
		DLQPaging:               true,
		DLQRowIDs:               true,
		DLQReplay:               true,
	}
}

// Gen015 is the 0.15.1 broker (C++ over PostgreSQL).
func Gen015() Generation {
	return Generation{
		Name: "0.15.1",
		lacks: []Endpoint{
			{"GET", RoutePopDiscover},
			{"POST", RouteFetch},
			{"GET", RouteQueueDepth},
			{"DELETE", RouteDLQ},
			{"POST", RouteDLQReplay},
			{"POST", RouteMessageRetry},
		},
		RawPathParams:          true,
		ErrorsAs200:            true,
		DefaultPopBatch:        1,
		EmptyPopErrors:         []string{"no_available_partition", "partition_not_found", "lease_held"},
		SubscriptionOnEveryPop: true,
		RenewArray:             true,
		SeekAtOrBefore:         true,
	}
}

// GenerationOf is the generation of the broker whose GET /health answered
// h: 2.x when it names an engine, 0.15.1 (and older) when it does not.
func GenerationOf(h HealthResponse) Generation {
	if h.Engine != "" {
		return Gen2x()
	}
	return Gen015()
}

// Serves reports whether the generation has method on route r.
func (g Generation) Serves(method string, r Route) bool {
	return !slices.Contains(g.lacks, Endpoint{method, r})
}

// EmptyPop reports whether err, the error of a success:false pop answer,
// means "no messages" on this generation.
func (g Generation) EmptyPop(err string) bool { return slices.Contains(g.EmptyPopErrors, err) }

// EmptyPopError reports whether err, the error of a success:false pop
// answer, means "no messages" on some generation: what a client that does
// not know the generation reads such an answer by.
func EmptyPopError(err string) bool { return Gen015().EmptyPop(err) || Gen2x().EmptyPop(err) }
