package queen

import (
	"fmt"
	"strings"
	"testing"

	"github.com/queen-go/queen/internal/wire"
)

// BenchmarkDecodeAcks decodes a 2.x answer to a batch ack of 100 messages,
// as the consume loop does after every batch.
func BenchmarkDecodeAcks(b *testing.B) {
	var sb strings.Builder
	items := make([]wire.AckItem, 100)
	sb.WriteByte('[')
	for i := range items {
		items[i] = wire.AckItem{TransactionID: fmt.Sprintf("t%d", i), PartitionID: "7", LeaseID: "L", Status: wire.StatusCompleted}
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"index":%d,"transactionId":"t%d","success":true,"error":null,"leaseReleased":%t,"dlq":false,"noop":false}`, i, i, i == len(items)-1)
	}
	sb.WriteByte(']')
	body := []byte(sb.String())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeAcks(body, "/a", items); err != nil {
			b.Fatal(err)
		}
	}
}
