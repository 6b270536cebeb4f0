package queentest

// LeasedCount returns how many messages of queue are leased to group right
// now (delivered under a live lease and not yet acknowledged); group ""
// means queue mode. Read-only.
func (s *Server) LeasedCount(queue, group string) int {
	group = groupOrQueueMode(group)
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[queue]
	if q == nil {
		return 0
	}
	return b.leasedMessages(q, group, b.now())
}

// DLQCount returns how many dead letters queue holds. Read-only.
func (s *Server) DLQCount(queue string) int {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, r := range b.dlq {
		if r.queue == queue {
			n++
		}
	}
	return n
}
