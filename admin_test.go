package queen_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/queen-go/queen"
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
	if !errors.As(err, &be) || be.Status != 404 {
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
	// Known to be 0.15.1 now: a replay sends nothing.
	if _, err := c.Admin().ReplayDLQ(t.Context(), page.Messages[0]); !errors.Is(err, queen.ErrNotSupported) {
		t.Fatalf("replay: %v", err)
	}
	if len(stub.requests()) != 3 {
		t.Fatal("a replay known to be unsupported was sent")
	}
}

// A replay whose route the broker lacks (0.15.1's HTML 404) is
// ErrNotSupported, without the page.
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
