package use

import "github.com/queen-go/queen"

type alias = queen.QueueBuilder

func dropped(c *queen.Client, q *queen.QueueBuilder) {
	q.Partition("a")                          // want `result of Partition dropped: a \*queen.QueueBuilder is a value`
	(q.Partition("b"))                        // want `result of Partition dropped`
	c.Queue("orders")                         // want `result of Queue dropped: a \*queen.QueueBuilder`
	q.Push(1)                                 // want `result of Push dropped: a \*queen.PushBuilder`
	q.Push(1).TraceID("t")                    // want `result of TraceID dropped: a \*queen.PushBuilder`
	q.Create().Replace()                      // want `result of Replace dropped: a \*queen.CreateBuilder`
	q.Delete()                                // want `result of Delete dropped: a \*queen.DeleteBuilder`
	q.Consume().GracePeriod(0)                // want `result of GracePeriod dropped: a \*queen.ConsumeBuilder`
	c.Transaction().Queue("t").Partition("p") // want `result of Partition dropped: a \*queen.TransactionPush`
	set := q.Partition
	set("c")                     // want `result of call dropped: a \*queen.QueueBuilder`
	func() *alias { return q }() // want `result of call dropped`
}

func used(c *queen.Client, q *queen.QueueBuilder) (*queen.QueueBuilder, error) {
	q = q.Partition("a")
	_ = q.Partition("b") // dropped on purpose, and said so
	_, _ = q.Pop()
	q.Pop()
	_ = q.Push(1).TraceID("t").Execute()
	q.Push(1).Execute()
	q.Consume().GracePeriod(0).Execute()
	// A transaction accumulates: these add to tx.
	tx := c.Transaction()
	tx.Ack("m")
	tx.Queue("t").Partition("p").Push(1)
	// Not a value builder.
	c.Producer().Partition("p")
	return q.Partition("d"), nil
}
