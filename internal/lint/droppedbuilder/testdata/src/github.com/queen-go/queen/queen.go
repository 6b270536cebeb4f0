// Package queen is the shape of the client's builders, for the test.
package queen

type Client struct{}

func (c *Client) Queue(name string) *QueueBuilder  { return &QueueBuilder{} }
func (c *Client) Transaction() *TransactionBuilder { return &TransactionBuilder{} }
func (c *Client) Producer() *Producer              { return &Producer{} }

type QueueBuilder struct{ partition string }

func (b *QueueBuilder) Partition(name string) *QueueBuilder {
	cp := *b
	cp.partition = name
	return &cp
}
func (b *QueueBuilder) Push(payloads ...any) *PushBuilder { return &PushBuilder{} }
func (b *QueueBuilder) Create() *CreateBuilder            { return &CreateBuilder{} }
func (b *QueueBuilder) Delete() *DeleteBuilder            { return &DeleteBuilder{} }
func (b *QueueBuilder) Consume() *ConsumeBuilder          { return &ConsumeBuilder{} }
func (b *QueueBuilder) Pop() ([]string, error)            { return nil, nil }

type PushBuilder struct{}

func (p *PushBuilder) TraceID(id string) *PushBuilder { return p }
func (p *PushBuilder) Execute() error                 { return nil }

type CreateBuilder struct{}

func (c *CreateBuilder) Replace() *CreateBuilder { return c }

type DeleteBuilder struct{}

type ConsumeBuilder struct{}

func (c *ConsumeBuilder) GracePeriod(int) *ConsumeBuilder { return c }
func (c *ConsumeBuilder) Execute() error                  { return nil }

type TransactionBuilder struct{}

func (t *TransactionBuilder) Ack(id string) *TransactionBuilder  { return t }
func (t *TransactionBuilder) Queue(name string) *TransactionPush { return &TransactionPush{} }

type TransactionPush struct{}

func (p *TransactionPush) Partition(name string) *TransactionPush   { return p }
func (p *TransactionPush) Push(payloads ...any) *TransactionBuilder { return &TransactionBuilder{} }

type Producer struct{}

func (p *Producer) Partition(name string) *Producer { return p }
