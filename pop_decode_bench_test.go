package queen

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// BenchmarkDecodePop decodes a 2.x pop answer of 100 messages, each with
// an object payload, as the consume loop does on every pop.
func BenchmarkDecodePop(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"success":true,"queue":"orders","partition":"p","partitionId":"7","leaseId":"L","consumerGroup":"g","partitionsClaimed":1,"messages":[`)
	for i := range 100 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"id":"0193a1b2-0000-7000-8000-%012d","transactionId":"t%d","traceId":null,"data":{"n":%d,"kind":"order","ok":true},"producerSub":null,"createdAt":"2026-12-01T10:00:00.123456Z","partitionId":"7","partition":"p","leaseId":"L","consumerGroup":"g","deliveryAttempt":1,"offset":%d}`, i, i, i, i)
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	c := &Client{log: slog.New(slog.DiscardHandler)}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := c.decodePop(body, "/p", false); err != nil {
			b.Fatal(err)
		}
	}
}
