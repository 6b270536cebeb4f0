package queen_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queen-go/queen"
	"github.com/queen-go/queen/queentest"
)

func TestSeekConsumerGroupSpecCalls(t *testing.T) {
	// The two calls of the documentation, as written, and the 0.15.1
	// answers captured for them.
	stub, client := newWireStubFunc(t, func(r stubReq) (int, string) {
		if r.Method == http.MethodGet { // the group's lookup before each seek
			return 200, `[{"name":"archiver","topics":["events"],"queueName":"events","members":1,"partitionsWithLag":0,"totalLag":null,"maxTimeLag":0,"state":"Stable"}]`
		}
		if strings.Contains(string(r.Body), "toEnd") {
			return 200, `{"consumerGroup":"archiver","partitionsUpdated":3,"queueName":"events","seekToEnd":true,"success":true,"targetTimestamp":null}`
		}
		return 200, `{"consumerGroup":"archiver","partitionsUpdated":3,"queueName":"events","seekToEnd":false,"success":true,"targetTimestamp":"2026-10-22T00:00:00.000Z"}`
	})
	ctx := t.Context()
	res, err := client.Admin().SeekConsumerGroup(ctx, "archiver", "events",
		queen.SeekConsumerGroupOptions{Timestamp: "2026-10-22T00:00:00Z"})
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 10, 22, 0, 0, 0, 0, time.UTC)
	if res.PartitionsUpdated != 3 || res.ToEnd || !res.Timestamp.Equal(want) || res.ConsumerGroup != "archiver" || res.Queue != "events" || res.Partition != "" {
		t.Fatalf("result = %+v", res)
	}
	res, err = client.Admin().SeekConsumerGroup(ctx, "archiver", "events",
		queen.SeekConsumerGroupOptions{ToEnd: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.ToEnd || !res.Timestamp.IsZero() || res.PartitionsUpdated != 3 {
		t.Fatalf("result = %+v", res)
	}
	reqs := stub.requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests, want a lookup and a seek twice", len(reqs))
	}
	wantRoute(t, reqs[0], http.MethodGet, "/api/v1/consumer-groups")
	wantRoute(t, reqs[1], http.MethodPost, "/api/v1/consumer-groups/archiver/queues/events/seek")
	jsonEqual(t, reqs[1].Body, `{"timestamp":"2026-10-22T00:00:00Z"}`)
	wantRoute(t, reqs[2], http.MethodGet, "/api/v1/consumer-groups")
	wantRoute(t, reqs[3], http.MethodPost, "/api/v1/consumer-groups/archiver/queues/events/seek")
	jsonEqual(t, reqs[3].Body, `{"toEnd":true}`)
}

func TestSeek2xAnswerAndEscaping(t *testing.T) {
	stub, c := newWireStub(t, 200, `{"success":true,"consumerGroup":"a?b","queueName":"q 1","partitionName":null,"seekToEnd":false,"targetTimestamp":"2026-10-21T22:00:00.000000Z","partitionsUpdated":2,"updated":true,"futureField":{"x":1}}`)
	res, err := c.Admin().SeekConsumerGroup(t.Context(), "a?b", "q 1", queen.SeekConsumerGroupOptions{Timestamp: "2026-10-22T00:00:00+02:00", CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	r := stub.only()
	wantRoute(t, r, http.MethodPost, "/api/v1/consumer-groups/a%3Fb/queues/q%201/seek")
	jsonEqual(t, r.Body, `{"timestamp":"2026-10-21T22:00:00Z"}`) // sent in UTC
	if res.PartitionsUpdated != 2 || !res.Timestamp.Equal(time.Date(2026, 10, 21, 22, 0, 0, 0, time.UTC)) {
		t.Fatalf("result = %+v", res)
	}
}

func TestSeekBadOptionsSendNothing(t *testing.T) {
	tests := []struct {
		name         string
		group, queue string
		opts         queen.SeekConsumerGroupOptions
		want         error
	}{
		{"neither", "g", "q", queen.SeekConsumerGroupOptions{}, queen.ErrInvalidSeek},
		{"both", "g", "q", queen.SeekConsumerGroupOptions{ToEnd: true, Timestamp: "2026-10-22T00:00:00Z"}, queen.ErrInvalidSeek},
		{"date only", "g", "q", queen.SeekConsumerGroupOptions{Timestamp: "2026-10-22"}, queen.ErrInvalidSeek},
		{"words", "g", "q", queen.SeekConsumerGroupOptions{Timestamp: "yesterday"}, queen.ErrInvalidSeek},
		{"no zone", "g", "q", queen.SeekConsumerGroupOptions{Timestamp: "2026-10-22T00:00:00"}, queen.ErrInvalidSeek},
		{"no group", "", "q", queen.SeekConsumerGroupOptions{ToEnd: true}, queen.ErrEmptyGroup},
		{"no queue", "g", "", queen.SeekConsumerGroupOptions{ToEnd: true}, queen.ErrEmptyQueue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stub, c := newWireStub(t, 200, `{"success":true}`)
			_, err := c.Admin().SeekConsumerGroup(t.Context(), tt.group, tt.queue, tt.opts)
			if !errors.Is(err, tt.want) || !errors.Is(err, queen.ErrInvalidArgument) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			_, err = c.Admin().SeekPartition(t.Context(), tt.group, tt.queue, "p", tt.opts)
			if !errors.Is(err, tt.want) {
				t.Fatalf("SeekPartition err = %v, want %v", err, tt.want)
			}
			stub.nothingSent()
		})
	}
	stub, c := newWireStub(t, 200, `{"success":true}`)
	if _, err := c.Admin().SeekPartition(t.Context(), "g", "q", "", queen.SeekConsumerGroupOptions{ToEnd: true}); !errors.Is(err, queen.ErrEmptyPartition) || !errors.Is(err, queen.ErrInvalidArgument) {
		t.Fatalf("empty partition: err = %v", err)
	}
	stub.nothingSent()
}

func TestSeekRefusals(t *testing.T) {
	t.Run("2.x 404", func(t *testing.T) {
		_, c := newWireStub(t, 404, `{"success":false,"error":"Queue not found or has no partitions","consumerGroup":"g","queueName":"q","partitionsUpdated":0}`)
		_, err := c.Admin().SeekConsumerGroup(t.Context(), "g", "q", queen.SeekConsumerGroupOptions{ToEnd: true, CreateIfMissing: true})
		var be *queen.BrokerError
		if !errors.As(err, &be) || be.Status != 404 || be.Message != "Queue not found or has no partitions" {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("0.15.1 failure in a 200", func(t *testing.T) {
		_, c := newWireStub(t, 200, `{"success":false,"error":"database error"}`)
		_, err := c.Admin().SeekConsumerGroup(t.Context(), "g", "q", queen.SeekConsumerGroupOptions{ToEnd: true, CreateIfMissing: true})
		var be *queen.BrokerError
		if !errors.As(err, &be) || be.Message != "database error" {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestSeekPartition(t *testing.T) {
	stub, c := newWireStub(t, 200, `{"success":true,"consumerGroup":"g","queueName":"q","partitionName":"customer-42","seekToEnd":false,"targetTimestamp":"2026-01-01T00:00:00.000000Z","partitionsUpdated":1,"updated":true}`)
	res, err := c.Admin().SeekPartition(t.Context(), "g", "q", "customer-42", queen.SeekConsumerGroupOptions{Timestamp: "2026-01-01T00:00:00Z", CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	r := stub.only()
	wantRoute(t, r, http.MethodPost, "/api/v1/consumer-groups/g/queues/q/partitions/customer-42/seek")
	jsonEqual(t, r.Body, `{"timestamp":"2026-01-01T00:00:00Z"}`)
	if res.Partition != "customer-42" || res.PartitionsUpdated != 1 {
		t.Fatalf("result = %+v", res)
	}

	// A broker that seeks the partition to its end whatever it is asked
	// (0.15.1) is not taken for a success.
	_, c = newWireStub(t, 200, `{"success":true,"consumerGroup":"g","queueName":"q","seekToEnd":true,"partitionsUpdated":1}`)
	res, err = c.Admin().SeekPartition(t.Context(), "g", "q", "p", queen.SeekConsumerGroupOptions{Timestamp: "2026-01-01T00:00:00Z", CreateIfMissing: true})
	if !errors.Is(err, queen.ErrNotSupported) || !res.ToEnd {
		t.Fatalf("err = %v, res = %+v; want ErrNotSupported with the result", err, res)
	}
}

// A real 0.15.1 broker answers a partition seek with updated (a bool) and
// cursorMovedTo, never seekToEnd or partitionsUpdated.
func TestSeekPartition015(t *testing.T) {
	body := func(name string) string {
		b, err := os.ReadFile("testdata/broker-0.15.1/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tt := range []struct {
		file    string
		opts    queen.SeekConsumerGroupOptions
		updated int
		notSupp bool
	}{
		{"seek_partition.json", queen.SeekConsumerGroupOptions{ToEnd: true}, 1, false},
		{"seek_partition_no_cursor.json", queen.SeekConsumerGroupOptions{ToEnd: true}, 0, false},
		{"seek_partition.json", queen.SeekConsumerGroupOptions{Timestamp: "2026-01-01T00:00:00Z"}, 1, true},
	} {
		t.Run(tt.file, func(t *testing.T) {
			_, c := newWireStub(t, 200, body(tt.file))
			tt.opts.CreateIfMissing = true
			res, err := c.Admin().SeekPartition(t.Context(), "g", "q", "p", tt.opts)
			if got := errors.Is(err, queen.ErrNotSupported); got != tt.notSupp || (err != nil && !tt.notSupp) {
				t.Fatalf("err = %v, want ErrNotSupported %v", err, tt.notSupp)
			}
			want := queen.SeekResult{ConsumerGroup: "g", Queue: "q", Partition: "p", ToEnd: true, PartitionsUpdated: tt.updated}
			if res != want {
				t.Fatalf("result = %+v, want %+v", res, want)
			}
		})
	}
}

const groupList2x = `[
 {"name":"billing","topics":["orders"],"queueName":"orders","members":4,"partitionCursors":4,"partitionsWithLag":2,"totalLag":17,"maxTimeLag":420,"state":"Lagging","storage":"segments","kind":"queen","subscriptionMode":"all","subscriptionTimestamp":"1970-01-01T00:00:00.000000Z","subscriptionCreatedAt":"2026-10-01T08:00:00.000000Z","conflation":false},
 {"name":"__QUEUE_MODE__","topics":["orders"],"queueName":"orders","members":1,"partitionCursors":1,"partitionsWithLag":0,"totalLag":0,"maxTimeLag":0,"state":"Stable","storage":"segments","kind":"queen","subscriptionMode":null,"subscriptionTimestamp":null,"subscriptionCreatedAt":null,"conflation":false}]`

func TestListConsumerGroups(t *testing.T) {
	stub, c := newWireStub(t, 200, groupList2x)
	groups, err := c.Admin().ListConsumerGroups(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	wantRoute(t, stub.only(), http.MethodGet, "/api/v1/consumer-groups")
	if len(groups) != 2 {
		t.Fatalf("got %d groups", len(groups))
	}
	g := groups[0]
	if g.Name != "billing" || g.Queue != "orders" || g.TotalLag != 17 || g.PartitionsWithLag != 2 || g.PartitionCursors != 4 ||
		g.MaxTimeLag != 7*time.Minute || g.State != queen.GroupLagging || g.SubscriptionMode != "all" ||
		!g.SubscriptionCreatedAt.Equal(time.Date(2026, 10, 1, 8, 0, 0, 0, time.UTC)) {
		t.Fatalf("group = %+v", g)
	}
	if groups[1].State != queen.GroupStable || groups[1].SubscriptionMode != "" {
		t.Fatalf("queue mode row = %+v", groups[1])
	}

	// An object-wrapped list is read too; an error object is an error.
	_, c = newWireStub(t, 200, `{"consumerGroups":`+groupList2x+`}`)
	if groups, err := c.Admin().ListConsumerGroups(t.Context()); err != nil || len(groups) != 2 {
		t.Fatalf("wrapped: %v, %d", err, len(groups))
	}
	_, c = newWireStub(t, 200, `{"error":"boom"}`)
	if _, err := c.Admin().ListConsumerGroups(t.Context()); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("err = %v", err)
	}
}

func TestGetConsumerGroup(t *testing.T) {
	stub, c := newWireStub(t, 200, `{"orders":{"conflation":false,"kind":"queen","partitions":[
	 {"partition":"customer-42","workerId":null,"lastConsumedAt":null,"totalConsumed":10,"offsetLag":3,"timeLagSeconds":12,"leaseActive":true},
	 {"partition":"customer-7","workerId":"w1","lastConsumedAt":"2026-10-01T08:00:00.000Z","totalConsumed":1,"offsetLag":0,"timeLagSeconds":0,"leaseActive":false}]},
	 "prices":{"conflation":true,"kind":"queen","partitions":[]}}`)
	d, err := c.Admin().GetConsumerGroup(t.Context(), "billing")
	if err != nil {
		t.Fatal(err)
	}
	wantRoute(t, stub.only(), http.MethodGet, "/api/v1/consumer-groups/billing")
	o := d.Queues["orders"]
	if d.Name != "billing" || len(d.Queues) != 2 || !d.Queues["prices"].Conflation || len(o.Partitions) != 2 {
		t.Fatalf("detail = %+v", d)
	}
	p := o.Partitions[0]
	if p.Partition != "customer-42" || p.OffsetLag != 3 || p.TimeLag != 12*time.Second || !p.LeaseActive || p.TotalConsumed != 10 || p.WorkerID != "" {
		t.Fatalf("partition = %+v", p)
	}
	if o.Partitions[1].WorkerID != "w1" || o.Partitions[1].LastConsumedAt.IsZero() {
		t.Fatalf("partition = %+v", o.Partitions[1])
	}

	_, c = newWireStub(t, 404, `{"error":"Consumer group not found"}`)
	_, err = c.Admin().GetConsumerGroup(t.Context(), "nope")
	var be *queen.BrokerError
	if !errors.As(err, &be) || be.Status != 404 {
		t.Fatalf("err = %v", err)
	}
	stub, c = newWireStub(t, 200, `{}`)
	if _, err := c.Admin().GetConsumerGroup(t.Context(), ""); !errors.Is(err, queen.ErrEmptyGroup) || !errors.Is(err, queen.ErrInvalidArgument) {
		t.Fatalf("err = %v", err)
	}
	stub.nothingSent()
}

func TestDeleteConsumerGroup(t *testing.T) {
	stub, c := newWireStub(t, 200, `{"success":true,"consumerGroup":"billing","queueName":null,"deletedPartitions":5,"metadataDeleted":true,"queues":["orders","prices"]}`)
	res, err := c.Admin().DeleteConsumerGroup(t.Context(), "billing", queen.DeleteConsumerGroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := stub.only()
	wantRoute(t, r, http.MethodDelete, "/api/v1/consumer-groups/billing")
	if r.Query.Get("deleteMetadata") != "true" {
		t.Fatalf("query = %v", r.Query)
	}
	if res.DeletedPartitions != 5 || !res.MetadataDeleted || res.Queue != "" || len(res.Queues) != 2 {
		t.Fatalf("result = %+v", res)
	}

	stub, c = newWireStub(t, 200, `{"success":true,"consumerGroup":"billing","queueName":"orders","deletedPartitions":2,"metadataDeleted":false,"queues":["orders"]}`)
	res, err = c.Admin().DeleteConsumerGroup(t.Context(), "billing", queen.DeleteConsumerGroupOptions{Queue: "orders", KeepMetadata: true})
	if err != nil {
		t.Fatal(err)
	}
	r = stub.only()
	wantRoute(t, r, http.MethodDelete, "/api/v1/consumer-groups/billing/queues/orders")
	if r.Query.Get("deleteMetadata") != "false" || res.Queue != "orders" || res.MetadataDeleted {
		t.Fatalf("query = %v, result = %+v", r.Query, res)
	}

	stub, c = newWireStub(t, 200, `{}`)
	if _, err := c.Admin().DeleteConsumerGroup(t.Context(), "", queen.DeleteConsumerGroupOptions{}); !errors.Is(err, queen.ErrEmptyGroup) || !errors.Is(err, queen.ErrInvalidArgument) {
		t.Fatalf("err = %v", err)
	}
	stub.nothingSent()
}

func TestListAndGetQueues(t *testing.T) {
	stub, c := newWireStub(t, 200, `{"queues":[{"id":"0193","name":"orders","queue":"orders","namespace":"shop","task":"","storage":"segments","partitions":3,
	 "segments":{"segments":3,"messages":40},"messages":{"total":40,"pending":5,"processing":0,"completed":35,"deadLetter":0},"retainedBytes":1234,
	 "options":{"priority":0,"leaseTime":300,"retryLimit":3,"retryDelay":1000,"maxSize":0,"ttl":3600,"deadLetterQueue":true,"dlqAfterMaxRetries":true,"minPopWaitTime":0},
	 "createdAt":"2026-10-01T08:00:00.000000Z"}],"kvRows":0,"kvBytes":0,"timerRows":0,"timerBytes":0}`)
	qs, err := c.Admin().ListQueues(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	wantRoute(t, stub.only(), http.MethodGet, "/api/v1/resources/queues")
	if len(qs) != 1 {
		t.Fatalf("got %d queues", len(qs))
	}
	q := qs[0]
	if q.Name != "orders" || q.Namespace != "shop" || q.Partitions != 3 || q.Messages.Pending != 5 || q.Messages.Completed != 35 ||
		q.RetainedBytes != 1234 || q.Config.RetryLimit == nil || *q.Config.RetryLimit != 3 || q.Config.DeadLetterQueue == nil || !*q.Config.DeadLetterQueue || q.CreatedAt.IsZero() {
		t.Fatalf("queue = %+v", q)
	}

	stub, c = newWireStub(t, 200, `{"id":"0193","name":"orders","namespace":"","task":"","createdAt":"2026-10-01T08:00:00.000000Z",
	 "options":{"leaseTime":60},"partitions":[
	  {"id":"0194","name":"customer-42","createdAt":"2026-10-01T08:00:00.000000Z","messages":{"total":4,"pending":1,"processing":1,"completed":3,"failed":null,"deadLetter":0},
	   "stats":{},"cursor":{"totalConsumed":3,"batchesConsumed":0},"lastActivity":null,"oldestMessage":"2026-10-01T08:00:00.000000Z","newestMessage":"2026-10-02T08:00:00.000000Z"}],
	 "segments":{"segments":1,"messages":4},"totals":{"total":4,"pending":1,"processing":1,"completed":3,"failed":null,"deadLetter":0},"retainedBytes":99}`)
	d, err := c.Admin().GetQueue(t.Context(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	wantRoute(t, stub.only(), http.MethodGet, "/api/v1/resources/queues/orders")
	if d.Name != "orders" || d.Partitions != 1 || d.Messages.Total != 4 || len(d.PartitionList) != 1 || *d.Config.LeaseTime != time.Minute {
		t.Fatalf("detail = %+v", d)
	}
	p := d.PartitionList[0]
	if p.Name != "customer-42" || p.Messages.Processing != 1 || !p.LastActivity.IsZero() || p.NewestMessage.IsZero() {
		t.Fatalf("partition = %+v", p)
	}

	_, c = newWireStub(t, 404, `{"error":"Queue not found"}`)
	var be *queen.BrokerError
	if _, err := c.Admin().GetQueue(t.Context(), "nope"); !errors.As(err, &be) || be.Status != 404 {
		t.Fatalf("err = %v", err)
	}
	stub, c = newWireStub(t, 200, `{}`)
	if _, err := c.Admin().GetQueue(t.Context(), ""); !errors.Is(err, queen.ErrEmptyQueue) {
		t.Fatalf("err = %v", err)
	}
	stub.nothingSent()
}

func TestConfigureAndDeleteQueue(t *testing.T) {
	stub, c := newWireStub(t, 200, `{"configured":true,"queue":"orders","namespace":"","task":"","options":{"retryLimit":5,"leaseTime":300}}`)
	info, err := c.Admin().ConfigureQueue(t.Context(), "orders", queen.QueueConfig{RetryLimit: queen.Ptr(5)})
	if err != nil {
		t.Fatal(err)
	}
	r := stub.only()
	wantRoute(t, r, http.MethodPost, "/api/v1/configure")
	jsonEqual(t, r.Body, `{"queue":"orders","options":{"retryLimit":5}}`) // merge: no mode
	if info.Name != "orders" || *info.Config.RetryLimit != 5 {
		t.Fatalf("info = %+v", info)
	}

	stub, c = newWireStub(t, 200, `{"configured":true,"queue":"orders","options":{}}`)
	if _, err := c.Admin().ReplaceQueueConfig(t.Context(), "orders", queen.QueueConfig{LeaseTime: queen.Ptr(30 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, stub.only().Body, `{"queue":"orders","options":{"leaseTime":30},"mode":"replace"}`)

	stub, c = newWireStub(t, 200, `{"deleted":true,"existed":true,"queue":"orders"}`)
	res, err := c.Admin().DeleteQueue(t.Context(), "orders")
	if err != nil || !res.Deleted || !res.Existed {
		t.Fatalf("res = %+v, err = %v", res, err)
	}
	wantRoute(t, stub.only(), http.MethodDelete, "/api/v1/resources/queues/orders")
}

func TestHealth(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		body    string
		healthy bool
		engine  string
	}{
		{"2.x", 200, `{"status":"healthy","engine":"raft","version":"2.7.1","raft":{"role":"leader","leader":true,"term":3,"applied":10,"commit":10,"lag":0,"storageReady":true}}`, true, "raft"},
		{"2.x settling", 503, `{"status":"settling","engine":"raft","version":"2.7.1"}`, false, "raft"},
		{"0.15.1", 200, `{"database":"connected","queen":{"status":"active","worker_id":1},"server":"C++ Queen Server (libqueen)","status":"healthy","version":"1.0.0","worker_id":1}`, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stub, c := newWireStub(t, tt.status, tt.body)
			stub.passHealth()
			h, err := c.Admin().Health(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			wantRoute(t, stub.only(), http.MethodGet, "/health")
			if h.Healthy != tt.healthy || h.Engine != tt.engine || h.HTTPStatus != tt.status || h.Status == "" {
				t.Fatalf("health = %+v", h)
			}
		})
	}
	stub, c := newWireStub(t, 503, `<html>down</html>`)
	stub.passHealth()
	if _, err := c.Admin().Health(t.Context()); err == nil {
		t.Fatalf("a 503 that is not a health report must be an error")
	}
}

const dlqPage2x = `{"messages":[
 {"id":"0193aaaa-0000-7000-8000-000000000001","queue":"emails","partition":"p1","partitionId":"17","createdAt":"2026-10-02T10:00:00.000000Z","consumerGroup":"mailer","offset":4,"messageId":"0193bbbb-0000-7000-8000-000000000001","transactionId":"tx-4","data":{"to":"x"},"payload":{"to":"x"},"errorMessage":"bounced","retryCount":3,"failedAt":"2026-10-02T10:00:00.000000Z"},
 {"id":"0193aaaa-0000-7000-8000-000000000002","queue":"emails","partition":"p2","partitionId":"18","createdAt":"2026-10-01T10:00:00.000000Z","consumerGroup":"mailer","offset":0,"messageId":null,"transactionId":"tx-0","data":"plain","payload":"plain","errorMessage":"Retries exhausted","retryCount":3,"failedAt":"2026-10-01T10:00:00.000000Z"}],
 "total":7,"pagination":{"limit":2,"offset":0}}`

func TestListDLQ(t *testing.T) {
	stub, c := newWireStub(t, 200, dlqPage2x)
	page, err := c.Admin().ListDLQ(t.Context(), "emails", queen.DLQListOptions{ConsumerGroup: "mailer", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	r := stub.only()
	wantRoute(t, r, http.MethodGet, "/api/v1/dlq")
	if r.Query.Encode() != "consumerGroup=mailer&limit=2&queue=emails" {
		t.Fatalf("query = %s", r.Query.Encode())
	}
	if page.Total != 7 || page.Limit != 2 || len(page.Messages) != 2 {
		t.Fatalf("page = %+v", page)
	}
	m := page.Messages[0]
	if m.ID != "0193aaaa-0000-7000-8000-000000000001" || m.Partition != "p1" || m.PartitionID != "17" || m.Offset != 4 || m.Error != "bounced" ||
		m.RetryCount != 3 || string(m.Payload) != `{"to":"x"}` || m.ConsumerGroup != "mailer" || m.TransactionID != "tx-4" ||
		!m.FailedAt.Equal(time.Date(2026, 10, 2, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("message = %+v", m)
	}
	if page.Messages[1].MessageID != "" || string(page.Messages[1].Payload) != `"plain"` {
		t.Fatalf("message 1 = %+v", page.Messages[1])
	}
}

func TestListDLQFiltersTheBrokerIgnored(t *testing.T) {
	// The 2.x broker filters only queue and group: partition and time
	// filters are sent, and applied to what comes back.
	stub, c := newWireStub(t, 200, dlqPage2x)
	from := time.Date(2026, 10, 2, 0, 0, 0, 0, time.UTC)
	page, err := c.Admin().ListDLQ(t.Context(), "emails", queen.DLQListOptions{Partition: "p1", From: from, To: from.Add(24 * time.Hour), Offset: 10})
	if err != nil {
		t.Fatal(err)
	}
	q := stub.only().Query
	if q.Get("partition") != "p1" || q.Get("from") != "2026-10-02T00:00:00Z" || q.Get("to") != "2026-10-03T00:00:00Z" || q.Get("offset") != "10" {
		t.Fatalf("query = %v", q)
	}
	if len(page.Messages) != 1 || page.Messages[0].Partition != "p1" {
		t.Fatalf("page = %+v", page)
	}
	page, err = c.Admin().ListDLQ(t.Context(), "emails", queen.DLQListOptions{To: from})
	if err != nil || len(page.Messages) != 1 || page.Messages[0].TransactionID != "tx-0" {
		t.Fatalf("page = %+v, err = %v", page, err)
	}
}

func TestListDLQTimeFilterDropsRowsWithoutFailedAt(t *testing.T) {
	// A row with no failedAt, or one that cannot be read, cannot be shown
	// to lie in the window: with From or To set it is left out; without
	// them it is kept.
	_, c := newWireStub(t, 200, `{"messages":[
 {"id":"1","queue":"emails","transactionId":"no-time","data":1,"retryCount":0},
 {"id":"2","queue":"emails","transactionId":"bad-time","data":1,"retryCount":0,"failedAt":"yesterday"},
 {"id":"3","queue":"emails","transactionId":"in","data":1,"retryCount":0,"failedAt":"2026-10-02T10:00:00Z"}],"total":3}`)
	from := time.Date(2026, 10, 2, 0, 0, 0, 0, time.UTC)
	for _, opts := range []queen.DLQListOptions{{From: from}, {To: from.Add(24 * time.Hour)}, {From: from, To: from.Add(24 * time.Hour)}} {
		page, err := c.Admin().ListDLQ(t.Context(), "emails", opts)
		if err != nil || len(page.Messages) != 1 || page.Messages[0].TransactionID != "in" {
			t.Fatalf("opts %+v: page = %+v, err = %v", opts, page, err)
		}
	}
	page, err := c.Admin().ListDLQ(t.Context(), "emails", queen.DLQListOptions{})
	if err != nil || len(page.Messages) != 3 {
		t.Fatalf("no time filter: page = %+v, err = %v", page, err)
	}
}

func TestListDLQBareArrayAndBadInput(t *testing.T) {
	_, c := newWireStub(t, 200, `[{"id":"1","queue":"emails","transactionId":"t","data":{"a":1},"errorMessage":null,"retryCount":0,"failedAt":"2026-10-02T10:00:00Z"}]`)
	page, err := c.Admin().ListDLQ(t.Context(), "emails", queen.DLQListOptions{})
	if err != nil || page.Total != 1 || string(page.Messages[0].Payload) != `{"a":1}` || page.Messages[0].Offset != -1 {
		t.Fatalf("page = %+v, err = %v", page, err)
	}
	now := time.Now()
	for name, tc := range map[string]struct {
		queue string
		opts  queen.DLQListOptions
	}{
		"no queue":       {"", queen.DLQListOptions{}},
		"negative limit": {"q", queen.DLQListOptions{Limit: -1}},
		"empty range":    {"q", queen.DLQListOptions{From: now, To: now}},
	} {
		t.Run(name, func(t *testing.T) {
			stub, c := newWireStub(t, 200, `{}`)
			if _, err := c.Admin().ListDLQ(t.Context(), tc.queue, tc.opts); !errors.Is(err, queen.ErrInvalidArgument) {
				t.Fatalf("err = %v", err)
			}
			stub.nothingSent()
		})
	}
}

func TestReplayDLQ(t *testing.T) {
	stub, c := newWireStub(t, 200, `{"success":true,"result":"moved","queue":"emails","partition":"p1","consumerGroup":"mailer","dlqId":"0193aaaa-0000-7000-8000-000000000001","originalTransactionId":"tx-4",
	 "replayedAs":{"index":0,"message_id":"0193cccc-0000-7000-8000-000000000009","transaction_id":"dlq:0193aaaa-0000-7000-8000-000000000001","queueName":"emails","status":"queued","offset":11},"dlqRowRemoved":true}`)
	res, err := c.Admin().ReplayDLQ(t.Context(), queen.DeadLetter{ID: "0193aaaa-0000-7000-8000-000000000001"})
	if err != nil {
		t.Fatal(err)
	}
	r := stub.only()
	wantRoute(t, r, http.MethodPost, "/api/v1/dlq/0193aaaa-0000-7000-8000-000000000001/replay")
	jsonEqual(t, r.Body, `{}`)
	if !res.Moved || res.Offset != 11 || res.TransactionID != "dlq:0193aaaa-0000-7000-8000-000000000001" || res.MessageID == "" ||
		res.Queue != "emails" || res.Partition != "p1" || res.OriginalTransactionID != "tx-4" {
		t.Fatalf("result = %+v", res)
	}

	_, c = newWireStub(t, 200, `{"success":true,"result":"duplicate","queue":"emails","partition":"p1","replayedAs":{"index":0,"message_id":"00000000-0000-0000-0000-000000000000","transaction_id":"dlq:x","status":"duplicate","offset":3},"dlqRowRemoved":false}`)
	res, err = c.Admin().ReplayDLQ(t.Context(), queen.DeadLetter{ID: "x"})
	if err != nil || res.Moved || res.Result != "duplicate" || res.MessageID != "" {
		t.Fatalf("result = %+v, err = %v", res, err)
	}

	_, c = newWireStub(t, 404, `{"success":false,"result":"gone","error":"Message not found"}`)
	_, err = c.Admin().ReplayDLQ(t.Context(), queen.DeadLetter{ID: "x", PartitionID: "17", TransactionID: "t"})
	var be *queen.BrokerError
	if !errors.As(err, &be) || be.Status != 404 || !errors.Is(err, queen.ErrDeadLetterNotFound) {
		t.Fatalf("err = %v, want the broker's 404", err)
	}

	stub, c = newWireStub(t, 200, `{}`)
	if _, err := c.Admin().ReplayDLQ(t.Context(), queen.DeadLetter{TransactionID: "t"}); !errors.Is(err, queen.ErrNotReplayable) || !errors.Is(err, queen.ErrInvalidArgument) {
		t.Fatalf("err = %v", err)
	}
	stub.nothingSent()
}

func TestReplayDLQFallsBackToAddressRoute(t *testing.T) {
	stub, c := newWireStubFunc(t, func(r stubReq) (int, string) {
		if strings.HasPrefix(r.Path, "/api/v1/dlq/") {
			return 404, `{"code":"no_such_route","error":"not found","path":"` + r.Path + `"}`
		}
		return 200, `{"success":true,"result":"moved","queue":"emails","partition":"p1"}`
	})
	res, err := c.Admin().ReplayDLQ(t.Context(), queen.DeadLetter{ID: "row", PartitionID: "5bbcbea4-8c8f-41fe-855c-66ef47c23ba8", TransactionID: "tx|1"})
	if err != nil || !res.Moved {
		t.Fatalf("res = %+v, err = %v", res, err)
	}
	reqs := stub.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests", len(reqs))
	}
	wantRoute(t, reqs[1], http.MethodPost, "/api/v1/messages/5bbcbea4-8c8f-41fe-855c-66ef47c23ba8/tx%7C1/retry")
}

func TestAnswersWithoutSuccessField(t *testing.T) {
	// An answer with no "success" is read by its content: an error text is a
	// refusal, anything else a success.
	_, c := newWireStub(t, 200, `{"consumerGroup":"g","queueName":"q","seekToEnd":true,"partitionsUpdated":4}`)
	if res, err := c.Admin().SeekConsumerGroup(t.Context(), "g", "q", queen.SeekConsumerGroupOptions{ToEnd: true, CreateIfMissing: true}); err != nil || res.PartitionsUpdated != 4 {
		t.Fatalf("seek: %+v, %v", res, err)
	}
	_, c = newWireStub(t, 200, `{"consumerGroup":"g","deletedPartitions":1}`)
	if res, err := c.Admin().DeleteConsumerGroup(t.Context(), "g", queen.DeleteConsumerGroupOptions{}); err != nil || res.DeletedPartitions != 1 {
		t.Fatalf("delete: %+v, %v", res, err)
	}
	_, c = newWireStub(t, 200, `{"error":"permission denied"}`)
	var be *queen.BrokerError
	if _, err := c.Admin().DeleteConsumerGroup(t.Context(), "g", queen.DeleteConsumerGroupOptions{}); !errors.As(err, &be) || be.Message != "permission denied" {
		t.Fatalf("delete refused: %v", err)
	}
	_, c = newWireStub(t, 200, `{"result":"moved","queue":"q"}`)
	if res, err := c.Admin().ReplayDLQ(t.Context(), queen.DeadLetter{ID: "x"}); err != nil || !res.Moved {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	_, c = newWireStub(t, 200, `{"success":false,"error":"push refused","reason":"storage_full"}`)
	if _, err := c.Admin().ReplayDLQ(t.Context(), queen.DeadLetter{ID: "x"}); !errors.As(err, &be) || be.Code != "storage_full" {
		t.Fatalf("replay refused: %v", err)
	}
}

// A broker that answers a failure with HTTP 200 and an error object (every
// database route of 0.15.1 does) is refused, with the broker's message, by
// every admin read: never an empty queue, page or group.
func TestAdminReadsRefuseErrorObjectsIn200(t *testing.T) {
	const body = `{"error":"ERROR:  relation \"queen.queues\" does not exist","success":false}`
	calls := map[string]func(c *queen.Client) error{
		"GetQueue": func(c *queen.Client) error { _, err := c.Admin().GetQueue(t.Context(), "orders"); return err },
		"ListDLQ": func(c *queen.Client) error {
			_, err := c.Admin().ListDLQ(t.Context(), "orders", queen.DLQListOptions{})
			return err
		},
		"GetConsumerGroup":   func(c *queen.Client) error { _, err := c.Admin().GetConsumerGroup(t.Context(), "g"); return err },
		"ListQueues":         func(c *queen.Client) error { _, err := c.Admin().ListQueues(t.Context()); return err },
		"ListConsumerGroups": func(c *queen.Client) error { _, err := c.Admin().ListConsumerGroups(t.Context()); return err },
		"Fetch":              func(c *queen.Client) error { _, err := c.Queue("orders").Fetch(t.Context(), []string{"p"}); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			_, c := newWireStub(t, 200, body)
			err := call(c)
			var be *queen.BrokerError
			if !errors.As(err, &be) || be.Status != 200 || !strings.Contains(be.Message, `relation "queen.queues" does not exist`) || string(be.Body) != body {
				t.Fatalf("err = %v, want a *BrokerError with the broker's message and body", err)
			}
		})
	}
}

// A 0.15.1 broker puts a time seek's cursor ON the last message at or
// before the time, so messages stored at exactly that time would be
// skipped; the client asks the broker's generation once (GET /health) and
// sends one microsecond less there, so that the group reads everything
// stored at or after the time on both generations.
func TestSeekTimeOnLegacyBroker(t *testing.T) {
	for _, tt := range []struct {
		name, health, asked, sent string
	}{
		{"0.15.1", `{"status":"healthy","database":"connected","version":"1.0.0"}`, "2026-10-22T00:00:00Z", "2026-10-21T23:59:59.999999Z"},
		{"0.15.1, below a microsecond", `{"status":"healthy","database":"connected","version":"1.0.0"}`, "2026-10-22T00:00:00.0000005Z", "2026-10-22T00:00:00Z"},
		{"0.15.1, other offset", `{"status":"healthy","database":"connected","version":"1.0.0"}`, "2026-10-22T02:00:00.000002+02:00", "2026-10-22T00:00:00.000001Z"},
		{"2.x", `{"status":"healthy","engine":"raft","version":"2.7.1"}`, "2026-10-22T00:00:00Z", "2026-10-22T00:00:00Z"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stub, c := newWireStubFunc(t, func(r stubReq) (int, string) {
				if r.Path == "/health" {
					return 200, tt.health
				}
				return 200, `{"success":true,"consumerGroup":"g","queueName":"q","seekToEnd":false,"partitionsUpdated":1}`
			})
			stub.passHealth()
			for range 2 {
				res, err := c.Admin().SeekConsumerGroup(t.Context(), "g", "q", queen.SeekConsumerGroupOptions{Timestamp: tt.asked, CreateIfMissing: true})
				if err != nil {
					t.Fatal(err)
				}
				if want, _ := time.Parse(time.RFC3339Nano, tt.asked); !res.Timestamp.Equal(want) {
					t.Fatalf("result time %v, want the time asked %v", res.Timestamp, want)
				}
			}
			reqs := stub.requests()
			if len(reqs) != 3 || reqs[0].Path != "/health" {
				t.Fatalf("requests %+v: want one health probe, then the two seeks", reqs)
			}
			for _, r := range reqs[1:] {
				var body map[string]any
				if err := json.Unmarshal(r.Body, &body); err != nil || body["timestamp"] != tt.sent {
					t.Fatalf("seek body %s (%v), want timestamp %s", r.Body, err, tt.sent)
				}
			}
		})
	}
}

// On a 0.15.1 broker the DLQ list is asked for with neither limit nor
// offset (it would answer nothing for any offset), and paged here.
func TestListDLQOn015AsksForTheWholeList(t *testing.T) {
	stub, c := newWireStubFunc(t, func(r stubReq) (int, string) {
		if r.Path == "/health" {
			return 200, `{"status":"healthy","database":"connected","server":"C++ Queen Server (libqueen)","worker_id":1,"version":"1.0.0"}`
		}
		return 200, `{"messages":[
 {"id":"m3","transactionId":"t3","partitionId":"5bbcbea4-8c8f-41fe-855c-66ef47c23ba8","queue":"emails","partition":"p1","consumerGroup":"mailer","errorMessage":"x","retryCount":2,"data":3,"producerSub":"svc","createdAt":"2026-10-02T09:00:00.123Z","failedAt":"2026-10-02T10:00:03.000Z"},
 {"id":"m2","transactionId":"t2","partitionId":"5bbcbea4-8c8f-41fe-855c-66ef47c23ba8","queue":"emails","partition":"p2","consumerGroup":"mailer","errorMessage":"x","retryCount":1,"data":2,"producerSub":null,"createdAt":"2026-10-02T09:00:00.000Z","failedAt":"2026-10-02T10:00:02.000Z"},
 {"id":"m1","transactionId":"t1","partitionId":"5bbcbea4-8c8f-41fe-855c-66ef47c23ba8","queue":"emails","partition":"p1","consumerGroup":"mailer","errorMessage":"x","retryCount":0,"data":1,"producerSub":null,"createdAt":"2026-10-02T09:00:00.000Z","failedAt":"2026-10-02T10:00:01.000Z"}],
 "pagination":{"limit":100,"offset":0}}`
	})
	stub.passHealth()
	from := time.Date(2026, 10, 2, 10, 0, 1, 0, time.UTC)
	page, err := c.Admin().ListDLQ(t.Context(), "emails", queen.DLQListOptions{ConsumerGroup: "mailer", Partition: "p1", From: from, Limit: 1, Offset: 1})
	if err != nil {
		t.Fatal(err)
	}
	reqs := stub.requests()
	if len(reqs) != 2 || reqs[0].Path != "/health" || reqs[1].Query.Encode() != "consumerGroup=mailer&queue=emails" {
		t.Fatalf("requests %+v: want the generation probe, then the list with queue and group only", reqs)
	}
	if page.Total != 2 || page.Limit != 1 || page.Offset != 1 || len(page.Messages) != 1 {
		t.Fatalf("page = %+v, want 1 of the 2 messages of p1", page)
	}
	m := page.Messages[0]
	if m.ID != "" || m.MessageID != "m1" || m.Offset != -1 || m.Partition != "p1" || !m.FailedAt.Equal(from) ||
		!m.MessageCreatedAt.Equal(time.Date(2026, 10, 2, 9, 0, 0, 0, time.UTC)) {
		t.Fatalf("entry = %+v", m)
	}
	page, err = c.Admin().ListDLQ(t.Context(), "emails", queen.DLQListOptions{Limit: 1})
	if err != nil || page.Total != 3 || page.Messages[0].MessageID != "m3" || page.Messages[0].ProducerSub != "svc" {
		t.Fatalf("page = %+v, %v", page, err)
	}
	if len(stub.requests()) != 3 {
		t.Fatal("the generation was asked twice")
	}
}

// A replay whose routes a broker that says it is 2.x lacks (an HTML 404)
// is ErrNotSupported, without the page.
func TestReplayDLQRouteMissingIsNotSupported(t *testing.T) {
	stub, c := newWireStub(t, 404, `<html><body><h1>File Not Found</h1><hr><i>uWebSockets/20 Server</i></body></html>`)
	_, err := c.Admin().ReplayDLQ(t.Context(), queen.DeadLetter{ID: "row", PartitionID: "5bbcbea4-8c8f-41fe-855c-66ef47c23ba8", TransactionID: "t"})
	if !errors.Is(err, queen.ErrNotSupported) || strings.Contains(err.Error(), "<html>") {
		t.Fatalf("err = %v", err)
	}
	if n := len(stub.requests()); n != 2 {
		t.Fatalf("%d requests, want the id route then the address route", n)
	}
}

// On a broker known to be 0.15.1 a per-partition seek to a time is refused
// before it is sent: the broker would move the partition to its end and
// skip its backlog.
func TestSeekPartitionToTimeRefusedOn015(t *testing.T) {
	s, c := newWireStubFunc(t, func(r stubReq) (int, string) {
		if r.Path == "/health" {
			return 200, `{"status":"healthy","database":"connected","version":"1.0.0"}`
		}
		return 200, `{"success":true,"consumerGroup":"g","queueName":"q","partitionName":"p","updated":true,"cursorMovedTo":"x"}`
	})
	s.passHealth()
	_, err := c.Admin().SeekPartition(t.Context(), "g", "q", "p", queen.SeekConsumerGroupOptions{Timestamp: "2026-01-01T00:00:00Z", CreateIfMissing: true})
	if !errors.Is(err, queen.ErrNotSupported) {
		t.Fatalf("err = %v, want ErrNotSupported", err)
	}
	for _, r := range s.requests() {
		if r.Path != "/health" {
			t.Fatalf("sent %s %s; want nothing but GET /health", r.Method, r.Path)
		}
	}
	// ToEnd is what such a broker does: sent.
	if _, err := c.Admin().SeekPartition(t.Context(), "g", "q", "p", queen.SeekConsumerGroupOptions{ToEnd: true, CreateIfMissing: true}); err != nil {
		t.Fatalf("ToEnd: %v", err)
	}
	if n := len(s.requests()); n < 2 {
		t.Fatalf("%d requests; want the ToEnd seek sent", n)
	}
}

// deadLetterN pushes n messages {"i": 0..n-1} to queue/partition and
// dead-letters them in one settle, so that they fail at one instant: the
// broker's order among them is its own.
func deadLetterN(t *testing.T, c *queen.Client, queue, partition string, n int) {
	t.Helper()
	payloads := make([]any, n)
	for i := range payloads {
		payloads[i] = map[string]int{"i": i}
	}
	if _, err := c.Queue(queue).Partition(partition).Push(payloads...).Execute(t.Context()); err != nil {
		t.Fatal(err)
	}
	msgs, err := c.Queue(queue).Partition(partition).Batch(n).Wait(false).Pop(t.Context())
	if err != nil || len(msgs) != n {
		t.Fatalf("pop: %d messages, %v", len(msgs), err)
	}
	acks := make([]queen.Settlement, n)
	for i, m := range msgs {
		acks[i] = queen.Settlement{Message: m, Status: queen.StatusDLQ, Error: "boom"}
	}
	if _, err := c.SettleBatch(t.Context(), acks, queen.AckOptions{}); err != nil {
		t.Fatal(err)
	}
}

// DeadLetters yields every dead letter once, page after page, and asks
// for no page after the broker's last: on 2.x, 250 rows in pages of 100
// are three requests; on 0.15.1 (no paging) one request, whatever the
// page size. Breaking out of the loop asks for nothing more.
func TestDeadLettersAllPages(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			srv, c := newBroker(t, queentest.WithProfile(p))
			deadLetterN(t, c, "mail", "a", 150)
			deadLetterN(t, c, "mail", "b", 100)
			srv.ResetCounters()
			seen := map[string]int{}
			n := 0
			for dl, err := range c.Admin().DeadLetters(t.Context(), "mail", queen.DLQListOptions{}) {
				if err != nil {
					t.Fatal(err)
				}
				var v struct{ I int }
				if err := json.Unmarshal(dl.Payload, &v); err != nil {
					t.Fatal(err)
				}
				seen[dl.Partition+"/"+strconv.Itoa(v.I)]++
				n++
			}
			if n != 250 || len(seen) != 250 {
				t.Fatalf("yielded %d rows, %d distinct, want 250 once each", n, len(seen))
			}
			want := 3
			if p == queentest.Profile015 {
				want = 1
			}
			if got := srv.Requests(queentest.RouteDLQ); got != want {
				t.Errorf("%d DLQ requests, want %d", got, want)
			}

			srv.ResetCounters()
			n = 0
			for _, err := range c.Admin().DeadLetters(t.Context(), "mail", queen.DLQListOptions{Limit: 10, Offset: 245}) {
				if err != nil {
					t.Fatal(err)
				}
				n++
			}
			if n != 5 {
				t.Errorf("from offset 245: %d rows, want 5", n)
			}
			srv.ResetCounters()
			for range c.Admin().DeadLetters(t.Context(), "mail", queen.DLQListOptions{Limit: 10}) {
				break
			}
			if got := srv.Requests(queentest.RouteDLQ); got != 1 {
				t.Errorf("a loop that broke at its first row made %d requests, want 1", got)
			}
		})
	}
}

// dlqRow is one row of a stubbed 2.x DLQ answer.
func dlqRow(i int, partition string) map[string]any {
	return map[string]any{"id": fmt.Sprintf("row-%d", i), "queue": "mail", "partition": partition, "transactionId": fmt.Sprintf("tx-%d", i),
		"payload": map[string]int{"i": i}, "errorMessage": "boom", "failedAt": "2026-10-02T10:00:00.000000Z"}
}

// A 2.x broker that ignores the partition filter and caps the page at 2
// rows: pages the client's filter empties or shortens do not end the
// sequence, the broker's Total does; without a Total, a short page does.
func TestDeadLettersEndsOnTheBrokersRows(t *testing.T) {
	parts := []string{"p2", "p2", "p1", "p2", "p2", "p1", "p2"} // rows 0..6, newest first
	for _, withTotal := range []bool{true, false} {
		t.Run(fmt.Sprint("total=", withTotal), func(t *testing.T) {
			stub, c := newWireStubFunc(t, func(r stubReq) (int, string) {
				off, _ := strconv.Atoi(r.Query.Get("offset"))
				rows := []any{}
				for i := off; i < len(parts) && i < off+2; i++ {
					rows = append(rows, dlqRow(i, parts[i]))
				}
				page := map[string]any{"messages": rows, "pagination": map[string]int{"limit": 2, "offset": off}}
				if withTotal {
					page["total"] = len(parts)
				}
				b, _ := json.Marshal(page)
				return 200, string(b)
			})
			var got []string
			for dl, err := range c.Admin().DeadLetters(t.Context(), "mail", queen.DLQListOptions{Partition: "p1", Limit: 2}) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, dl.ID)
			}
			if fmt.Sprint(got) != "[row-2 row-5]" {
				t.Errorf("yielded %v, want [row-2 row-5] (p1's rows on pages 2 and 3)", got)
			}
			if n := len(stub.requests()); n != 4 {
				t.Errorf("%d requests, want 4 (offsets 0, 2, 4, 6: the last page has one row)", n)
			}
		})
	}
	// A page size above the broker's cap: with a Total, the capped pages do
	// not end it.
	stub, c := newWireStubFunc(t, func(r stubReq) (int, string) {
		off, _ := strconv.Atoi(r.Query.Get("offset"))
		rows := []any{}
		for i := off; i < 5 && i < off+2; i++ {
			rows = append(rows, dlqRow(i, "p1"))
		}
		b, _ := json.Marshal(map[string]any{"messages": rows, "total": 5, "pagination": map[string]int{"limit": 2, "offset": off}})
		return 200, string(b)
	})
	n := 0
	for _, err := range c.Admin().DeadLetters(t.Context(), "mail", queen.DLQListOptions{Limit: 50}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 5 || len(stub.requests()) != 3 {
		t.Errorf("%d rows in %d requests, want 5 in 3", n, len(stub.requests()))
	}
}

// Bad options are yielded once as an error, before any request; a page
// that fails is yielded once and ends the sequence.
func TestDeadLettersErrors(t *testing.T) {
	stub, c := newWireStub(t, 500, `{"error":"db down"}`)
	for _, opts := range []queen.DLQListOptions{{Limit: -1}, {From: time.Unix(10, 0), To: time.Unix(5, 0)}} {
		n := 0
		for _, err := range c.Admin().DeadLetters(t.Context(), "mail", opts) {
			n++
			if !errors.Is(err, queen.ErrInvalidArgument) {
				t.Errorf("%+v: %v, want ErrInvalidArgument", opts, err)
			}
		}
		if n != 1 {
			t.Errorf("%+v: %d values, want the one error", opts, n)
		}
	}
	if len(stub.requests()) != 0 {
		t.Fatalf("bad options sent %d requests", len(stub.requests()))
	}
	n := 0
	for _, err := range c.Admin().DeadLetters(t.Context(), "mail", queen.DLQListOptions{}) {
		n++
		if be, ok := errors.AsType[*queen.BrokerError](err); !ok || be.Status != 500 {
			t.Errorf("failed page: %v, want the broker's 500", err)
		}
	}
	if n != 1 {
		t.Errorf("failed page: %d values, want the one error", n)
	}
}

// Behaviour of the calls of issue 6 against the in-memory broker.

func newBroker(t *testing.T, opts ...queentest.Option) (*queentest.Server, *queen.Client) {
	t.Helper()
	srv := queentest.Start(t, opts...)
	c, err := queen.New(srv.URL, queen.WithRetryPolicy(queen.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(t.Context()) })
	return srv, c
}

func mustPush(t *testing.T, c *queen.Client, queue, partition string, payloads ...any) []queen.PushResult {
	t.Helper()
	res, err := c.Queue(queue).Partition(partition).Push(payloads...).Execute(t.Context())
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	return res
}

func popAll(t *testing.T, c *queen.Client, queue, group string) []*queen.Message {
	t.Helper()
	msgs, err := c.Queue(queue).Group(group).SubscriptionMode(queen.SubscriptionModeAll).Batch(100).Wait(false).Pop(t.Context())
	if err != nil {
		t.Fatalf("pop: %v", err)
	}
	return msgs
}

func payloads(msgs []*queen.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Raw)
	}
	return out
}

func ackAll(t *testing.T, c *queen.Client, msgs []*queen.Message, group string) {
	t.Helper()
	s := make([]queen.Settlement, len(msgs))
	for i, m := range msgs {
		s[i] = queen.Settlement{Message: m, Status: queen.StatusCompleted}
	}
	if _, err := c.SettleBatch(t.Context(), s, queen.AckOptions{ConsumerGroup: group}); err != nil {
		t.Fatalf("ack: %v", err)
	}
}

func TestQueentestSeekThenPop(t *testing.T) {
	t0 := time.Date(2026, 10, 21, 12, 0, 0, 0, time.UTC)
	clock := queentest.NewFakeClock(t0)
	_, c := newBroker(t, queentest.WithClock(clock))
	ctx := t.Context()

	mustPush(t, c, "events", "p", 1)
	clock.Advance(time.Hour)
	mustPush(t, c, "events", "p", 2, 3)

	first := popAll(t, c, "events", "archiver")
	if got := payloads(first); !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Fatalf("first pop = %v", got)
	}
	ackAll(t, c, first, "archiver")
	if got := popAll(t, c, "events", "archiver"); len(got) != 0 {
		t.Fatalf("after ack: %v", payloads(got))
	}

	// Back to half an hour after the first push: messages 2 and 3 again.
	res, err := c.Admin().SeekConsumerGroup(ctx, "archiver", "events",
		queen.SeekConsumerGroupOptions{Timestamp: t0.Add(30 * time.Minute).Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	if res.PartitionsUpdated != 1 || res.ToEnd {
		t.Fatalf("seek = %+v", res)
	}
	again := popAll(t, c, "events", "archiver")
	if got := payloads(again); !slices.Equal(got, []string{"2", "3"}) {
		t.Fatalf("after seek to a time: %v", got)
	}

	// To the end: the leased backlog is skipped (the seek drops the lease),
	// and only what is pushed later comes.
	if _, err := c.Admin().SeekConsumerGroup(ctx, "archiver", "events", queen.SeekConsumerGroupOptions{ToEnd: true}); err != nil {
		t.Fatal(err)
	}
	if got := popAll(t, c, "events", "archiver"); len(got) != 0 {
		t.Fatalf("after seek to end: %v", payloads(got))
	}
	mustPush(t, c, "events", "p", 4)
	if got := payloads(popAll(t, c, "events", "archiver")); !slices.Equal(got, []string{"4"}) {
		t.Fatalf("after a new push: %v", got)
	}

	// Per partition.
	if _, err := c.Admin().SeekPartition(ctx, "archiver", "events", "p", queen.SeekConsumerGroupOptions{Timestamp: "2000-01-01T00:00:00Z"}); err != nil {
		t.Fatal(err)
	}
	if got := payloads(popAll(t, c, "events", "archiver")); !slices.Equal(got, []string{"1", "2", "3", "4"}) {
		t.Fatalf("after partition seek to the start: %v", got)
	}
	if _, err := c.Admin().SeekConsumerGroup(ctx, "archiver", "missing", queen.SeekConsumerGroupOptions{ToEnd: true}); !errors.Is(err, queen.ErrGroupNotFound) {
		t.Fatalf("seek of a queue the group does not read: %v", err)
	}
	var be *queen.BrokerError
	if _, err := c.Admin().SeekConsumerGroup(ctx, "archiver", "missing", queen.SeekConsumerGroupOptions{ToEnd: true, CreateIfMissing: true}); !errors.As(err, &be) || be.Status != 404 {
		t.Fatalf("seek of a missing queue: %v", err)
	}
}

func TestQueentestTransactionAllOrNothing(t *testing.T) {
	_, c := newBroker(t)
	ctx := t.Context()
	mustPush(t, c, "tasks", "p", map[string]int{"n": 1})
	msgs := popAll(t, c, "tasks", "workers")
	if len(msgs) != 1 {
		t.Fatalf("popped %d", len(msgs))
	}
	msg := msgs[0]

	// An ack under a lease that is not the live one rolls the push back.
	stale := *msg
	stale.LeaseID = "01a22ab9-0000-7000-8000-000000000000"
	res, err := c.Transaction().
		Queue("results").Partition("p").Push(map[string]string{"done": "1"}).
		Ack(&stale, queen.StatusCompleted, queen.AckOptions{ConsumerGroup: "workers"}).
		Commit(ctx)
	var te *queen.TransactionError
	if !errors.As(err, &te) || res == nil || res.Committed {
		t.Fatalf("bad ack: err = %v, res = %+v; want a rollback", err, res)
	}
	read, err := c.Queue("results").Fetch(ctx, []string{"p"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(read["p"].Records); n != 0 || read["p"].HighWatermark != 0 {
		t.Fatalf("rolled back push left %d records (hw %d)", n, read["p"].HighWatermark)
	}

	// The same with the real lease commits both.
	res, err = c.Transaction().
		Queue("results").Partition("p").Push(map[string]string{"done": "1"}).
		Ack(msg, queen.StatusCompleted, queen.AckOptions{ConsumerGroup: "workers"}).
		Commit(ctx)
	if err != nil || !res.Committed {
		t.Fatalf("commit: %v, %+v", err, res)
	}
	if len(res.Results) != 2 || res.Results[0].Type != queen.TransactionPushOp || res.Results[1].Type != queen.TransactionAckOp {
		t.Fatalf("results = %+v", res.Results)
	}
	read, err = c.Queue("results").Fetch(ctx, []string{"p"})
	if err != nil || len(read["p"].Records) != 1 || string(read["p"].Records[0].Payload) != `{"done":"1"}` {
		t.Fatalf("results after commit: %+v, %v", read["p"], err)
	}
	if got := popAll(t, c, "tasks", "workers"); len(got) != 0 {
		t.Fatalf("acked task came back: %v", payloads(got))
	}

	// The same transaction again: its ack's lease is settled, so it rolls
	// back, and the push is not stored twice.
	_, err = c.Transaction().Ack(msg, queen.StatusCompleted, queen.AckOptions{ConsumerGroup: "workers"}).Commit(ctx)
	if !errors.Is(err, queen.ErrRolledBack) {
		t.Fatalf("second ack of a settled lease: %v", err)
	}
}

func TestQueentestFetch(t *testing.T) {
	_, c := newBroker(t)
	ctx := t.Context()
	mustPush(t, c, "orders", "customer-42", map[string]int{"total": 10}, map[string]int{"total": 20}, "third")

	read, err := c.Queue("orders").Fetch(ctx, []string{"customer-42", "empty"})
	if err != nil {
		t.Fatal(err)
	}
	pr := read["customer-42"]
	if pr.Err != nil || pr.HighWatermark != 3 || pr.LogStartOffset != 0 || len(pr.Records) != 3 {
		t.Fatalf("read = %+v", pr)
	}
	for i, r := range pr.Records {
		if r.Offset != int64(i) || r.TransactionID == "" || r.Timestamp.IsZero() {
			t.Fatalf("record %d = %+v", i, r)
		}
	}
	if string(pr.Records[2].Payload) != `"third"` {
		t.Fatalf("payload = %s", pr.Records[2].Payload)
	}
	if e := read["empty"]; e.Err != nil || len(e.Records) != 0 || e.HighWatermark != 0 {
		t.Fatalf("empty partition = %+v", e)
	}

	// A position of its own: continue from NextOffset; nothing moved for
	// anybody else.
	more, err := c.Queue("orders").Fetch(ctx, []string{"customer-42"}, queen.FetchFrom(pr.Records[1].Offset))
	if err != nil || len(more["customer-42"].Records) != 2 || more["customer-42"].NextOffset() != 3 {
		t.Fatalf("from 1: %+v, %v", more["customer-42"], err)
	}
	if got := popAll(t, c, "orders", "billing"); len(got) != 3 {
		t.Fatalf("a fetch moved a cursor: the group got %d", len(got))
	}

	far, err := c.Queue("orders").Fetch(ctx, []string{"customer-42"}, queen.FetchFrom(9))
	if err != nil || !errors.Is(far["customer-42"].Err, queen.ErrOffsetOutOfRange) {
		t.Fatalf("from 9: %v, %v", far["customer-42"].Err, err)
	}
	missing, err := c.Queue("nope").Fetch(ctx, []string{"p"})
	if err != nil || !errors.Is(missing["p"].Err, queen.ErrUnknownPartition) {
		t.Fatalf("unknown queue: %v, %v", missing["p"].Err, err)
	}

	// A page budget of one byte reads one record per fetch; the iterator
	// still reads to the end.
	small, err := c.Queue("orders").Fetch(ctx, []string{"customer-42"}, queen.FetchMaxBytes(1))
	if err != nil || len(small["customer-42"].Records) != 1 {
		t.Fatalf("max bytes 1: %+v, %v", small["customer-42"], err)
	}
	var offsets []int64
	for rec, err := range c.Queue("orders").ReadPartition(ctx, "customer-42", 1) {
		if err != nil {
			t.Fatal(err)
		}
		offsets = append(offsets, rec.Offset)
	}
	if !slices.Equal(offsets, []int64{1, 2}) {
		t.Fatalf("ReadPartition from 1 = %v", offsets)
	}
}

func TestQueentestFetchWaitsForAPush(t *testing.T) {
	srv, c := newBroker(t)
	ctx := t.Context()
	mustPush(t, c, "live", "p", 0)
	done := make(chan queen.FetchResult, 1)
	go func() {
		read, err := c.Queue("live").Fetch(ctx, []string{"p"}, queen.FetchFrom(1), queen.FetchWait(30*time.Second))
		if err != nil {
			t.Error(err)
		}
		done <- read
	}()
	if err := srv.AwaitRequests(ctx, queentest.RouteFetch, 1); err != nil { // the fetch has reached the broker
		t.Fatal(err)
	}
	mustPush(t, c, "live", "p", 1)
	select {
	case read := <-done:
		if recs := read["p"].Records; len(recs) != 1 || recs[0].Offset != 1 {
			t.Fatalf("long poll got %+v", read["p"])
		}
	case <-time.After(20 * time.Second): // the margin tells a wake-up from the 30 s wait
		t.Fatal("the fetch did not wake up on the push")
	}
}

func TestQueentestDLQAfterDlqAck(t *testing.T) {
	srv, c := newBroker(t)
	ctx := t.Context()
	mustPush(t, c, "emails", "p1", map[string]string{"to": "nobody@example.com"}, map[string]string{"to": "ok@example.com"})
	msgs := popAll(t, c, "emails", "mailer")
	if len(msgs) != 2 {
		t.Fatalf("popped %d", len(msgs))
	}
	opts := queen.AckOptions{ConsumerGroup: "mailer", Error: "mailbox does not exist"}
	if _, err := c.Transaction().Ack(msgs[0], "dlq", opts).Ack(msgs[1], "completed", opts).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := srv.DLQCount("emails"); n != 1 {
		t.Fatalf("DLQCount = %d", n)
	}

	page, err := c.Admin().ListDLQ(ctx, "emails", queen.DLQListOptions{ConsumerGroup: "mailer"})
	if err != nil {
		t.Fatal(err)
	}
	if page.Total != 1 || len(page.Messages) != 1 {
		t.Fatalf("page = %+v", page)
	}
	dl := page.Messages[0]
	if dl.TransactionID != msgs[0].TransactionID || dl.Partition != "p1" || dl.ConsumerGroup != "mailer" ||
		string(dl.Payload) != `{"to":"nobody@example.com"}` || dl.Error != "mailbox does not exist" || dl.ID == "" || dl.FailedAt.IsZero() {
		t.Fatalf("dead letter = %+v", dl)
	}
	for name, o := range map[string]queen.DLQListOptions{
		"other group":     {ConsumerGroup: "other"},
		"other partition": {Partition: "p2"},
		"before":          {To: dl.FailedAt.Add(-time.Minute)},
		"after":           {From: dl.FailedAt.Add(time.Minute)},
	} {
		if p, err := c.Admin().ListDLQ(ctx, "emails", o); err != nil || len(p.Messages) != 0 {
			t.Errorf("%s: %+v, %v", name, p, err)
		}
	}

	rr, err := c.Admin().ReplayDLQ(ctx, dl)
	if err != nil || !rr.Moved {
		t.Fatalf("replay: %+v, %v", rr, err)
	}
	if srv.DLQCount("emails") != 0 {
		t.Fatalf("row still in the DLQ")
	}
	back := popAll(t, c, "emails", "mailer")
	if len(back) != 1 || string(back[0].Raw) != `{"to":"nobody@example.com"}` || back[0].TransactionID != rr.TransactionID {
		t.Fatalf("replayed message = %v (txn %v), result %+v", payloads(back), back, rr)
	}
	var be *queen.BrokerError
	if _, err := c.Admin().ReplayDLQ(ctx, dl); !errors.As(err, &be) || be.Status != 404 || !errors.Is(err, queen.ErrDeadLetterNotFound) {
		t.Fatalf("second replay: %v", err)
	}
}

func TestQueentestGroupsQueuesHealth(t *testing.T) {
	_, c := newBroker(t)
	ctx := t.Context()
	mustPush(t, c, "orders", "a", 1, 2)
	mustPush(t, c, "orders", "b", 3)
	msgs := popAll(t, c, "orders", "billing")
	ackAll(t, c, msgs[:1], "billing")

	groups, err := c.Admin().ListConsumerGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(groups, func(g queen.ConsumerGroup) bool { return g.Name == "billing" })
	if i < 0 || groups[i].Queue != "orders" || groups[i].SubscriptionMode != "all" || groups[i].TotalLag == 0 {
		t.Fatalf("groups = %+v", groups)
	}
	d, err := c.Admin().GetConsumerGroup(ctx, "billing")
	if err != nil {
		t.Fatal(err)
	}
	if parts := d.Queues["orders"].Partitions; len(parts) == 0 {
		t.Fatalf("detail = %+v", d)
	}
	del, err := c.Admin().DeleteConsumerGroup(ctx, "billing", queen.DeleteConsumerGroupOptions{Queue: "orders"})
	if err != nil || del.DeletedPartitions == 0 || !del.MetadataDeleted {
		t.Fatalf("delete = %+v, %v", del, err)
	}
	var be *queen.BrokerError
	if _, err := c.Admin().GetConsumerGroup(ctx, "billing"); !errors.As(err, &be) || be.Status != 404 {
		t.Fatalf("deleted group: %v", err)
	}

	info, err := c.Admin().ConfigureQueue(ctx, "orders", queen.QueueConfig{RetryLimit: queen.Ptr(7)})
	if err != nil || info.Config.RetryLimit == nil || *info.Config.RetryLimit != 7 {
		t.Fatalf("configure: %+v, %v", info, err)
	}
	qs, err := c.Admin().ListQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 1 || qs[0].Name != "orders" || qs[0].Partitions != 2 || qs[0].Messages.Total != 3 || *qs[0].Config.RetryLimit != 7 {
		t.Fatalf("queues = %+v", qs)
	}
	q, err := c.Admin().GetQueue(ctx, "orders")
	if err != nil || len(q.PartitionList) != 2 || q.PartitionList[0].Name != "a" || q.Messages.Total != 3 {
		t.Fatalf("queue = %+v, %v", q, err)
	}
	if del, err := c.Admin().DeleteQueue(ctx, "orders"); err != nil || !del.Deleted {
		t.Fatalf("delete queue: %+v, %v", del, err)
	}
	if _, err := c.Admin().GetQueue(ctx, "orders"); !errors.As(err, &be) || be.Status != 404 {
		t.Fatalf("deleted queue: %v", err)
	}

	h, err := c.Admin().Health(ctx)
	if err != nil || !h.Healthy {
		t.Fatalf("health = %+v, %v", h, err)
	}
}

// The 2.x configure options beyond 0.15.1's are sent, kept by the broker and
// read back by GetQueue; a merge leaves them alone.
func TestQueentestConfigure2xOptions(t *testing.T) {
	_, c := newBroker(t)
	ctx := t.Context()
	info, err := c.Admin().ConfigureQueue(ctx, "lake", queen.QueueConfig{
		MinPopWaitTime: queen.Ptr(250 * time.Millisecond), DedupWindow: queen.Ptr(10 * time.Minute),
		RetentionSinkHold: queen.Ptr("s3-main"), RetentionSinkHoldMax: queen.Ptr(time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Admin().ConfigureQueue(ctx, "lake", queen.QueueConfig{RetryLimit: queen.Ptr(2)}); err != nil {
		t.Fatal(err)
	}
	q, err := c.Admin().GetQueue(ctx, "lake")
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []queen.QueueConfig{info.Config, q.Config} {
		if cfg.MinPopWaitTime == nil || *cfg.MinPopWaitTime != 250*time.Millisecond || cfg.DedupWindow == nil || *cfg.DedupWindow != 10*time.Minute ||
			cfg.RetentionSinkHold == nil || *cfg.RetentionSinkHold != "s3-main" ||
			cfg.RetentionSinkHoldMax == nil || *cfg.RetentionSinkHoldMax != time.Hour {
			t.Fatalf("config = %+v", cfg)
		}
	}
}

// The admin calls against queentest's 0.15.1 profile, which answers as the
// real 0.15.1 broker does (issue 19): one test per quirk of that broker.

// deadLetter015 pushes n messages to queue/partition and dead-letters them
// for group, one second apart (newest failure last).
func deadLetter015(t *testing.T, c *queen.Client, clock *queentest.FakeClock, queue, partition, group string, n int) []*queen.Message {
	t.Helper()
	for i := range n {
		mustPush(t, c, queue, partition, i)
	}
	var out []*queen.Message
	for len(out) < n {
		msgs, err := c.Queue(queue).Group(group).SubscriptionMode(queen.SubscriptionModeAll).Batch(1).Wait(false).Pop(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			t.Fatalf("dead-lettered %d of %d", len(out), n)
		}
		for _, m := range msgs {
			if _, err := c.Transaction().Ack(m, "dlq", queen.AckOptions{ConsumerGroup: group, Error: "boom"}).Commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			clock.Advance(time.Second)
		}
		out = append(out, msgs...)
	}
	return out
}

func newBroker015(t *testing.T) (*queentest.Server, *queen.Client, *queentest.FakeClock) {
	t.Helper()
	clock := queentest.NewFakeClock(time.Date(2026, 10, 21, 12, 0, 0, 0, time.UTC))
	srv, c := newBroker(t, queentest.Broker015(), queentest.WithClock(clock))
	return srv, c, clock
}

// The limit that never cuts the list, the offset that empties it and the
// missing total: the client asks once for the whole list and pages it.
func TestQueentest015ListDLQPagesAndCounts(t *testing.T) {
	srv, c, clock := newBroker015(t)
	ctx := t.Context()
	msgs := deadLetter015(t, c, clock, "mail", "p1", "g", 3)
	srv.ResetCounters()

	page, err := c.Admin().ListDLQ(ctx, "mail", queen.DLQListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if page.Total != 3 || len(page.Messages) != 1 || page.Limit != 1 || page.Offset != 0 {
		t.Fatalf("Limit 1: total %d, %d messages, limit %d (want 3, 1, 1)", page.Total, len(page.Messages), page.Limit)
	}
	newest := msgs[2]
	dl := page.Messages[0]
	if dl.ID != "" || dl.MessageID != newest.ID || dl.TransactionID != newest.TransactionID || dl.PartitionID != newest.PartitionID ||
		dl.Offset != -1 || dl.Error != "boom" || dl.ConsumerGroup != "g" || dl.Partition != "p1" || dl.Queue != "mail" {
		t.Fatalf("entry = %+v, want message %s, no row id", dl, newest.ID)
	}
	if !dl.MessageCreatedAt.Equal(newest.CreatedAt.Truncate(time.Millisecond)) || dl.FailedAt.IsZero() {
		t.Fatalf("times: created %v (message %v), failed %v", dl.MessageCreatedAt, newest.CreatedAt, dl.FailedAt)
	}

	// An offset: a real 0.15.1 broker would answer nothing; the client asks
	// without it.
	page, err = c.Admin().ListDLQ(ctx, "mail", queen.DLQListOptions{Limit: 2, Offset: 1})
	if err != nil {
		t.Fatal(err)
	}
	if page.Total != 3 || len(page.Messages) != 2 || page.Messages[0].MessageID != msgs[1].ID || page.Messages[1].MessageID != msgs[0].ID {
		t.Fatalf("Limit 2 Offset 1: %+v", page)
	}
	page, err = c.Admin().ListDLQ(ctx, "mail", queen.DLQListOptions{Offset: 5})
	if err != nil || page.Total != 3 || len(page.Messages) != 0 {
		t.Fatalf("offset past the end: %+v, %v", page, err)
	}
	if n := srv.Requests(queentest.RouteDLQ); n != 3 {
		t.Fatalf("%d DLQ requests for 3 calls, want one each", n)
	}
}

// The partition and time filters the 0.15.1 broker does not read.
func TestQueentest015ListDLQFiltersByPartitionAndTime(t *testing.T) {
	_, c, clock := newBroker015(t)
	ctx := t.Context()
	a := deadLetter015(t, c, clock, "mail", "a", "g", 2)
	deadLetter015(t, c, clock, "mail", "b", "g", 1)

	page, err := c.Admin().ListDLQ(ctx, "mail", queen.DLQListOptions{Partition: "a"})
	if err != nil || page.Total != 2 || len(page.Messages) != 2 {
		t.Fatalf("partition a: %+v, %v", page, err)
	}
	all, err := c.Admin().ListDLQ(ctx, "mail", queen.DLQListOptions{})
	if err != nil || all.Total != 3 {
		t.Fatalf("all: %+v, %v", all, err)
	}
	cut := all.Messages[1].FailedAt // the second newest failure
	page, err = c.Admin().ListDLQ(ctx, "mail", queen.DLQListOptions{To: cut})
	if err != nil || page.Total != 1 || page.Messages[0].MessageID != a[0].ID {
		t.Fatalf("to %v: %+v, %v", cut, page, err)
	}
	page, err = c.Admin().ListDLQ(ctx, "mail", queen.DLQListOptions{From: cut})
	if err != nil || page.Total != 2 {
		t.Fatalf("from %v: %+v, %v", cut, page, err)
	}
	page, err = c.Admin().ListDLQ(ctx, "mail", queen.DLQListOptions{ConsumerGroup: "other"})
	if err != nil || page.Total != 0 || len(page.Messages) != 0 {
		t.Fatalf("other group: %+v, %v", page, err)
	}
}

// A mistyped group is refused on both generations; on 0.15.1 a group
// whose pops found nothing has no position yet and is refused too.
func TestQueentestSeekRefusesAGroupWithoutPosition(t *testing.T) {
	for _, p := range queentest.Profiles() {
		t.Run(string(p), func(t *testing.T) {
			_, c := newBroker(t, queentest.WithProfile(p))
			ctx := t.Context()
			mustPush(t, c, "orders", "p", 1, 2)
			ackAll(t, c, popAll(t, c, "orders", "workers"), "workers")

			for _, o := range []queen.SeekConsumerGroupOptions{{ToEnd: true}, {Timestamp: "2000-01-01T00:00:00Z"}} {
				if _, err := c.Admin().SeekConsumerGroup(ctx, "wrokers", "orders", o); !errors.Is(err, queen.ErrGroupNotFound) {
					t.Fatalf("seek of a typo (%+v): %v", o, err)
				}
				if _, err := c.Admin().SeekPartition(ctx, "wrokers", "orders", "p", o); !errors.Is(err, queen.ErrGroupNotFound) {
					t.Fatalf("partition seek of a typo (%+v): %v", o, err)
				}
			}
			groups, err := c.Admin().ListConsumerGroups(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range groups {
				if g.Name == "wrokers" {
					t.Fatalf("the refused seek created the group: %+v", g)
				}
			}
			res, err := c.Admin().SeekConsumerGroup(ctx, "workers", "orders", queen.SeekConsumerGroupOptions{Timestamp: "2000-01-01T00:00:00Z"})
			if err != nil || res.PartitionsUpdated != 1 {
				t.Fatalf("seek of the real group: %+v, %v", res, err)
			}
			if got := payloads(popAll(t, c, "orders", "workers")); len(got) != 2 {
				t.Fatalf("after the seek: %v", got)
			}

			res, err = c.Admin().SeekConsumerGroup(ctx, "fresh", "orders", queen.SeekConsumerGroupOptions{ToEnd: true, CreateIfMissing: true})
			switch {
			case err != nil:
				t.Fatalf("CreateIfMissing: %v", err)
			case p == queentest.Profile2x && res.PartitionsUpdated != 1:
				t.Fatalf("2.x CreateIfMissing: %+v, want the group created", res)
			case p == queentest.Profile015 && res.PartitionsUpdated != 0:
				t.Fatalf("0.15.1 CreateIfMissing: %+v, want nothing moved (it moves only existing positions)", res)
			}
		})
	}
	// 0.15.1: a group whose only pop found the queue empty.
	_, c := newBroker(t, queentest.Broker015())
	ctx := t.Context()
	if msgs, err := c.Queue("empty").Group("idle").Wait(false).Pop(ctx); err != nil || len(msgs) != 0 {
		t.Fatalf("pop: %v, %v", msgs, err)
	}
	if _, err := c.Admin().SeekConsumerGroup(ctx, "idle", "empty", queen.SeekConsumerGroupOptions{ToEnd: true}); !errors.Is(err, queen.ErrGroupNotFound) {
		t.Fatalf("seek of a group with no position yet: %v", err)
	}
	if _, err := c.Admin().GetConsumerGroup(ctx, "idle"); !errors.Is(err, queen.ErrGroupNotFound) {
		t.Fatalf("detail of a group with no position yet: %v", err)
	}
}

// The queue and group views of 0.15.1 through the client: every field the
// broker sends, and its gaps as documented.
func TestQueentest015AdminViews(t *testing.T) {
	_, c, clock := newBroker015(t)
	ctx := t.Context()
	mustPush(t, c, "orders", "p", 1, 2, 3)
	clock.Advance(10 * time.Minute)
	msgs, err := c.Queue("orders").Group("g").SubscriptionMode(queen.SubscriptionModeAll).Batch(1).Wait(false).Pop(ctx)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("pop: %v, %v", msgs, err)
	}

	qs, err := c.Admin().ListQueues(ctx)
	if err != nil || len(qs) != 1 {
		t.Fatalf("queues: %+v, %v", qs, err)
	}
	q := qs[0]
	if q.Name != "orders" || q.ID == "" || q.Partitions != 1 || q.CreatedAt.IsZero() ||
		q.Messages.Total != 3 || q.Messages.Processing != 1 || q.Messages.Pending != 3 {
		t.Fatalf("queue = %+v (pending counts the processing one too)", q)
	}
	d, err := c.Admin().GetQueue(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.PartitionList) != 1 || d.Messages.Total != 3 || d.PartitionList[0].Messages.Total != 3 ||
		d.PartitionList[0].ID != msgs[0].PartitionID || d.PartitionList[0].NewestMessage.IsZero() || d.PartitionList[0].OldestMessage.IsZero() {
		t.Fatalf("detail = %+v", d)
	}
	if _, err := c.Admin().GetQueue(ctx, "nope"); !errors.Is(err, queen.ErrQueueNotFound) {
		t.Fatalf("missing queue: %v", err)
	}

	gs, err := c.Admin().ListConsumerGroups(ctx)
	if err != nil || len(gs) != 1 {
		t.Fatalf("groups: %+v, %v", gs, err)
	}
	g := gs[0]
	if g.Name != "g" || g.Queue != "orders" || g.PartitionCursors != 1 || g.PartitionsWithLag != 1 || g.TotalLag != -1 ||
		g.MaxTimeLag != 10*time.Minute || g.State != queen.GroupLagging || g.Conflation || g.Kind != "" {
		t.Fatalf("group = %+v", g)
	}
	gd, err := c.Admin().GetConsumerGroup(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	ps := gd.Queues["orders"].Partitions
	if len(ps) != 1 || ps[0].Partition != "p" || ps[0].OffsetLag != 3 || ps[0].TimeLag != 10*time.Minute || !ps[0].LeaseActive || ps[0].WorkerID == "" {
		t.Fatalf("group detail = %+v", gd)
	}

	h, err := c.Admin().Health(ctx)
	if err != nil || !h.Healthy || h.Engine != "" || h.Version != "1.0.0" || h.Database != "connected" || h.Server == "" ||
		h.WorkerID == 0 || h.WorkerStatus != "active" || string(h.SharedState) != `{"enabled":false}` || h.Raft != nil {
		t.Fatalf("health = %+v, %v", h, err)
	}
}

// DeleteConsumerGroup reads 0.15.1's answers: no queues list (Queues nil),
// no queueName in the group-wide one, an unknown group deleting nothing,
// and KeepMetadata sent as a deleteMetadata that broker reads.
func TestQueentest015DeleteConsumerGroup(t *testing.T) {
	_, c, _ := newBroker015(t)
	ctx := t.Context()
	for _, part := range []string{"p1", "p2"} {
		mustPush(t, c, "cgq", part, 1)
	}
	mustPush(t, c, "cgq2", "p1", 1)
	for _, q := range []string{"cgq", "cgq", "cgq2"} {
		msgs, err := c.Queue(q).Group("g").SubscriptionMode(queen.SubscriptionModeAll).Batch(10).Wait(false).Pop(ctx)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("pop %s: %d, %v", q, len(msgs), err)
		}
	}
	res, err := c.Admin().DeleteConsumerGroup(ctx, "g", queen.DeleteConsumerGroupOptions{Queue: "cgq", KeepMetadata: true})
	want := queen.DeleteGroupResult{ConsumerGroup: "g", Queue: "cgq", DeletedPartitions: 2}
	if err != nil || res.ConsumerGroup != want.ConsumerGroup || res.Queue != want.Queue || res.DeletedPartitions != 2 || res.MetadataDeleted || res.Queues != nil {
		t.Fatalf("queue delete = %+v, %v; want %+v", res, err, want)
	}
	res, err = c.Admin().DeleteConsumerGroup(ctx, "g", queen.DeleteConsumerGroupOptions{})
	if err != nil || res.ConsumerGroup != "g" || res.Queue != "" || res.DeletedPartitions != 1 || !res.MetadataDeleted || res.Queues != nil {
		t.Fatalf("group delete = %+v, %v", res, err)
	}
	res, err = c.Admin().DeleteConsumerGroup(ctx, "ghost", queen.DeleteConsumerGroupOptions{Queue: "nowhere"})
	if err != nil || res.ConsumerGroup != "ghost" || res.Queue != "nowhere" || res.DeletedPartitions != 0 || !res.MetadataDeleted {
		t.Fatalf("unknown group = %+v, %v", res, err)
	}
}

// stubReq is one request a wireStub received.
type stubReq struct {
	Method string
	Path   string // escaped path
	Query  url.Values
	Body   []byte
	Header http.Header
}

// wireStub is an httptest broker that records every request and answers
// with a function of it.
type wireStub struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	reqs   []stubReq
	answer func(stubReq) (int, string)
	// rawHealth passes GET /health to answer; by default the stub answers
	// it as a 2.x broker and does not record it (a timestamp seek asks the
	// broker's generation first).
	rawHealth bool
}

// passHealth makes GET /health go to the stub's answer function.
func (s *wireStub) passHealth() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rawHealth = true
}

// newWireStub starts a stub answering every request with status and body.
func newWireStub(t *testing.T, status int, body string) (*wireStub, *queen.Client) {
	return newWireStubFunc(t, func(stubReq) (int, string) { return status, body })
}

// newWireStubFunc starts a stub answering with fn, and a client for it that
// makes a single attempt per call.
func newWireStubFunc(t *testing.T, fn func(stubReq) (int, string)) (*wireStub, *queen.Client) {
	t.Helper()
	s := &wireStub{t: t, answer: fn}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		req := stubReq{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.Query(), Body: b, Header: r.Header.Clone()}
		s.mu.Lock()
		if r.URL.Path == "/health" && !s.rawHealth {
			s.mu.Unlock()
			_, _ = io.WriteString(w, `{"status":"healthy","engine":"raft","version":"2.0.1"}`)
			return
		}
		s.reqs = append(s.reqs, req)
		s.mu.Unlock()
		status, body := s.answer(req)
		if len(body) > 0 && (body[0] == '{' || body[0] == '[') {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(s.srv.Close)
	c, err := queen.New(s.srv.URL, queen.WithRetryPolicy(queen.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatalf("queen.New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(t.Context()) })
	return s, c
}

// requests returns a copy of the requests received so far.
func (s *wireStub) requests() []stubReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]stubReq(nil), s.reqs...)
}

// only returns the single request received, failing the test otherwise.
func (s *wireStub) only() stubReq {
	s.t.Helper()
	reqs := s.requests()
	if len(reqs) != 1 {
		s.t.Fatalf("broker got %d requests, want 1", len(reqs))
	}
	return reqs[0]
}

// nothingSent fails the test if any request reached the stub.
func (s *wireStub) nothingSent() {
	s.t.Helper()
	if n := len(s.requests()); n != 0 {
		s.t.Fatalf("broker got %d requests, want none (the error must come before any request)", n)
	}
}

// jsonEqual fails the test unless got and want hold the same JSON value.
func jsonEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want JSON: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("body mismatch\n got: %s\nwant: %s", got, want)
	}
}

// wantRoute fails the test unless r has the method and escaped path.
func wantRoute(t *testing.T, r stubReq, method, path string) {
	t.Helper()
	if r.Method != method || r.Path != path {
		t.Fatalf("request = %s %s, want %s %s", r.Method, r.Path, method, path)
	}
}
