package queentest

import (
	"errors"
	"fmt"
	"net"
	"testing"
)

// Cluster is one broker state served by several nodes, as 0.15.1 brokers
// over one PostgreSQL are: a message pushed through one node is popped
// through another, and acked through a third. Each node is a *Server of
// its own (its URL, faults and request counters), which Stop takes down
// and Resume brings back, alone. Create one with NewCluster (or
// StartCluster in a test) and give a client every URL.
//
// The nodes are peers: nothing models a 2.x cluster's leader or its
// forwarding. On Profile2x, a node's Restart drops the consume engine's
// memory, which all nodes share: what a leader change does in a 2.x
// cluster. Stop and Resume keep it, as a follower's loss does.
type Cluster struct {
	nodes []*Server
}

// NewCluster starts a cluster of n nodes at once, each on a free loopback
// port, with the options of every node (WithAddr is refused: each node
// takes a port of its own). It panics if it cannot start; ListenCluster
// returns the error instead.
func NewCluster(n int, opts ...Option) *Cluster {
	c, err := ListenCluster(n, opts...)
	if err != nil {
		panic("queentest: " + err.Error())
	}
	return c
}

// ListenCluster is NewCluster returning the error instead of panicking.
func ListenCluster(n int, opts ...Option) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("a cluster has at least one node, not %d", n)
	}
	o := newOptions(opts)
	if o.addr != "127.0.0.1:0" {
		return nil, errors.New("WithAddr names one address; a cluster's nodes each take a free loopback port")
	}
	b := o.newBroker()
	c := &Cluster{}
	for range n {
		s, err := listen(&o, b)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.nodes = append(c.nodes, s)
	}
	return c, nil
}

// StartCluster starts a cluster of n nodes for the test t and closes it
// when the test ends.
func StartCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	c := NewCluster(n, opts...)
	t.Cleanup(c.Close)
	return c
}

// Node returns node i, from 0.
func (c *Cluster) Node(i int) *Server { return c.nodes[i] }

// Nodes returns every node, in order.
func (c *Cluster) Nodes() []*Server { return append([]*Server(nil), c.nodes...) }

// URLs returns the base URL of every node, in order.
func (c *Cluster) URLs() []string {
	out := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		out[i] = s.URL
	}
	return out
}

// Requests returns how many requests of route r the nodes received
// together (see Server.Requests for one node's).
func (c *Cluster) Requests(r Route) int {
	n := 0
	for _, s := range c.nodes {
		n += s.Requests(r)
	}
	return n
}

// Close closes every node (see Server.Close).
func (c *Cluster) Close() {
	for _, s := range c.nodes {
		s.Close()
	}
}

// Stop takes the broker down as a killed process goes: it stops
// listening, so that connections are refused, closes every open
// connection, which ends the requests on them (a parked pop included),
// and returns once none of its request handlers runs. A request the
// broker had applied when its connection closed stays applied (a push
// stored, a pop's lease held until it expires), as it would in the
// database of a real broker. The broker state is untouched: on a
// Cluster, the other nodes go on serving it. Resume brings the node back;
// Stop on a stopped Server does nothing.
func (s *Server) Stop() {
	s.lmu.Lock()
	if s.closing || s.stopped {
		s.lmu.Unlock()
		return
	}
	s.stopped = true // no connection or request is taken from now on
	s.lmu.Unlock()
	s.down() // a pending RefuseConnections or Restart does not reopen
	s.awaitIdle()
	s.log.Debug("queentest node stopped", "addr", s.addr)
}

// Resume makes a stopped Server listen again on its address and serve,
// with the broker state as it is now. It returns an error when the Server
// is closed or the address cannot be listened on again; on a Server that
// is not stopped it does nothing.
func (s *Server) Resume() error {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	switch {
	case s.closing:
		return errors.New("queentest: the server is closed")
	case !s.stopped:
		return nil
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("queentest: listen again on %s: %w", s.addr, err)
	}
	s.stopped = false
	s.gen++
	s.ln = ln
	s.bg.Add(1)
	go s.serve(ln)
	s.log.Debug("queentest node resumed", "addr", s.addr)
	return nil
}
