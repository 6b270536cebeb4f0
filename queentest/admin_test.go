package queentest

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type tConfigured struct {
	Configured bool           `json:"configured"`
	Queue      string         `json:"queue"`
	QueueID    string         `json:"queueId"`
	Namespace  string         `json:"namespace"`
	Task       string         `json:"task"`
	Options    map[string]any `json:"options"`
}

func TestConfigureStoresEveryOptionAndMerges(t *testing.T) {
	h := newHC(t, Start(t))
	all := item{
		"leaseTime": 11, "retryLimit": 2, "retryDelay": 33, "priority": 4, "delayedProcessing": 5,
		"windowBuffer": 6, "maxSize": 7, "ttl": 8, "retentionSeconds": 9, "completedRetentionSeconds": 10,
		"retentionEnabled": true, "deadLetterQueue": false, "dlqAfterMaxRetries": false,
		"encryptionEnabled": true, "maxWaitTimeSeconds": 12,
	}
	var c tConfigured
	h.doJSON("POST", "/api/v1/configure", item{"queue": "q", "namespace": "ns", "task": "tk", "options": all}, http.StatusOK, &c)
	assert.True(t, c.Configured)
	assert.Equal(t, "q", c.Queue)
	assert.Regexp(t, uuidRE, c.QueueID)
	assert.Equal(t, "ns", c.Namespace)
	assert.Equal(t, "tk", c.Task)
	for k, v := range all {
		assert.EqualValues(t, v, c.Options[k], k)
	}
	var got struct {
		Namespace string         `json:"namespace"`
		Task      string         `json:"task"`
		Options   map[string]any `json:"options"`
	}
	h.doJSON("GET", "/api/v1/resources/queues/q", nil, http.StatusOK, &got)
	for k, v := range all {
		assert.EqualValues(t, v, got.Options[k], k)
	}
	assert.Equal(t, "ns", got.Namespace)

	// Merge (default): only what is named changes.
	h.doJSON("POST", "/api/v1/configure", item{"queue": "q", "options": item{"retryLimit": 9}}, http.StatusOK, &c)
	assert.EqualValues(t, 9, c.Options["retryLimit"])
	assert.EqualValues(t, 11, c.Options["leaseTime"])
	assert.Equal(t, "ns", c.Namespace)
	// Options at top level work too.
	h.doJSON("POST", "/api/v1/configure", item{"queue": "q", "ttl": 99}, http.StatusOK, &c)
	assert.EqualValues(t, 99, c.Options["ttl"])
	// Replace: back to the configure defaults, then the named options.
	h.doJSON("POST", "/api/v1/configure", item{"queue": "q", "mode": "replace", "options": item{"retryLimit": 1}}, http.StatusOK, &c)
	assert.EqualValues(t, 1, c.Options["retryLimit"])
	assert.EqualValues(t, 300, c.Options["leaseTime"], "configure default lease")
	assert.EqualValues(t, 3600, c.Options["ttl"])
	assert.Equal(t, true, c.Options["deadLetterQueue"])
	assert.Equal(t, "", c.Namespace)
}

func TestConfigureBadRequestsLeaveTheQueueAlone(t *testing.T) {
	h := newHC(t, Start(t))
	configure(h, "q", item{"retryLimit": 5})
	for name, body := range map[string]string{
		"no queue":       `{"options":{"retryLimit":1}}`,
		"malformed":      `{"queue":`,
		"bad mode":       `{"queue":"q","mode":"upsert","options":{"retryLimit":1}}`,
		"int as string":  `{"queue":"q","options":{"retryLimit":"1"}}`,
		"null resets no": `{"queue":"q","options":{"retryLimit":null}}`,
		"bool as int":    `{"queue":"q","options":{"retryLimit":1,"deadLetterQueue":1}}`,
	} {
		st, _, raw := h.do("POST", "/api/v1/configure", body)
		assert.Equal(t, http.StatusBadRequest, st, name)
		var e struct{ Error, Code string }
		require.NoError(t, json.Unmarshal(raw, &e), name)
		assert.NotEmpty(t, e.Error, name)
	}
	var got struct{ Options map[string]any }
	h.doJSON("GET", "/api/v1/resources/queues/q", nil, http.StatusOK, &got)
	assert.EqualValues(t, 5, got.Options["retryLimit"])
}

func TestDeleteQueue(t *testing.T) {
	s := Start(t)
	h := newHC(t, s)
	h.pushN("q", "p", 3)
	p := h.popQ("q", vals("consumerGroup", "g", "subscriptionMode", "all", "batch", "1"))
	h.ackMsg(p.Messages[0], "dlq", "g")
	require.Equal(t, 1, s.DLQCount("q"))

	var out map[string]any
	h.doJSON("DELETE", "/api/v1/resources/queues/q", nil, http.StatusOK, &out)
	assert.Equal(t, map[string]any{"deleted": true, "existed": true, "queue": "q"}, out)
	h.doJSON("GET", "/api/v1/resources/queues/q", nil, http.StatusNotFound, nil)
	assert.Equal(t, 0, s.DLQCount("q"))
	h.doJSON("DELETE", "/api/v1/resources/queues/q", nil, http.StatusOK, &out)
	assert.Equal(t, false, out["deleted"])
	assert.Equal(t, false, out["existed"])
	assert.NotEmpty(t, out["message"])

	// A new queue of that name starts empty, with fresh offsets.
	r := h.pushN("q", "p", 1)
	assert.EqualValues(t, 0, *r[0].Offset)
}

func TestQueueListAndGet(t *testing.T) {
	h := newHC(t, Start(t))
	h.pushN("b", "p", 2)
	h.pushN("a", "p", 1)
	h.pushN("a", "r", 1)
	var list struct {
		Queues []struct {
			Name       string         `json:"name"`
			Partitions int            `json:"partitions"`
			Messages   map[string]int `json:"messages"`
			Options    map[string]any `json:"options"`
		} `json:"queues"`
	}
	h.doJSON("GET", "/api/v1/resources/queues", nil, http.StatusOK, &list)
	require.Len(t, list.Queues, 2)
	assert.Equal(t, "a", list.Queues[0].Name)
	assert.Equal(t, 2, list.Queues[0].Partitions)
	assert.Equal(t, 2, list.Queues[0].Messages["total"])
	assert.Equal(t, 2, list.Queues[0].Messages["pending"])

	var q struct {
		Name       string `json:"name"`
		Partitions []struct {
			Name     string         `json:"name"`
			ID       string         `json:"id"`
			Messages map[string]int `json:"messages"`
		} `json:"partitions"`
		Totals map[string]any `json:"totals"`
	}
	h.doJSON("GET", "/api/v1/resources/queues/b", nil, http.StatusOK, &q)
	require.Len(t, q.Partitions, 1)
	assert.Equal(t, 2, q.Partitions[0].Messages["total"])
	assert.EqualValues(t, 2, q.Totals["total"])
	var e map[string]string
	h.doJSON("GET", "/api/v1/resources/queues/nope", nil, http.StatusNotFound, &e)
	assert.Equal(t, "Queue not found", e["error"])

	var depth map[string]any
	h.doJSON("GET", "/api/v1/resources/queues/b/depth", nil, http.StatusOK, &depth)
	assert.EqualValues(t, 2, depth["pending"])
}

func TestSeekToTimeAndToEnd(t *testing.T) {
	clock := NewFakeClock(t0)
	h := newHC(t, Start(t, WithClock(clock)))
	h.pushN("q", "a", 2) // t0
	clock.Advance(time.Minute)
	h.pushN("q", "a", 2) // t0+1m, offsets 2,3
	h.pushN("q", "b", 1)
	g := vals("consumerGroup", "g", "subscriptionMode", "all", "batch", "100", "partitions", "10")
	p := h.popQ("q", g)
	assert.Len(t, p.Messages, 5)
	// The group is leased; a seek drops the lease.

	var out map[string]any
	h.doJSON("POST", "/api/v1/consumer-groups/g/queues/q/seek", item{"timestamp": t0.Add(30 * time.Second).Format(time.RFC3339)}, http.StatusOK, &out)
	assert.Equal(t, true, out["success"])
	assert.Equal(t, false, out["seekToEnd"])
	assert.EqualValues(t, 2, out["partitionsUpdated"])
	assert.Equal(t, "g", out["consumerGroup"])
	assert.Equal(t, "q", out["queueName"])
	assert.Nil(t, out["partitionName"])
	assert.NotNil(t, out["targetTimestamp"])
	p = h.popQ("q", g)
	var offs []int64
	for _, m := range p.Messages {
		if m.Partition == "a" {
			offs = append(offs, m.Offset)
		}
	}
	assert.Equal(t, []int64{2, 3}, offs)

	// Rewind to the start with an early time, on one partition only.
	h.doJSON("POST", "/api/v1/consumer-groups/g/queues/q/partitions/a/seek", item{"timestamp": "2000-01-01T00:00:00Z"}, http.StatusOK, &out)
	assert.Equal(t, "a", out["partitionName"])
	assert.EqualValues(t, 1, out["partitionsUpdated"])
	p = h.popQ("q", vals("consumerGroup", "g", "batch", "100"))
	assert.EqualValues(t, 0, p.Messages[0].Offset)
	assert.Len(t, p.Messages, 4)

	// An empty body is toEnd.
	st, _, raw := h.do("POST", "/api/v1/consumer-groups/g/queues/q/seek", nil)
	require.Equal(t, http.StatusOK, st, string(raw))
	require.NoError(t, json.Unmarshal(raw, &out))
	assert.Equal(t, true, out["seekToEnd"])
	h.popEmpty("q", g)
	h.pushN("q", "b", 1)
	p = h.popQ("q", g)
	assert.Len(t, p.Messages, 1)

	// Neither toEnd nor a timestamp: 400. Unknown queue or partition: 404.
	st, _, _ = h.do("POST", "/api/v1/consumer-groups/g/queues/q/seek", item{"toEnd": false})
	assert.Equal(t, http.StatusBadRequest, st)
	st, _, _ = h.do("POST", "/api/v1/consumer-groups/g/queues/q/seek", item{"timestamp": "yesterday"})
	assert.Equal(t, http.StatusBadRequest, st)
	st, _, raw = h.do("POST", "/api/v1/consumer-groups/g/queues/nope/seek", item{"toEnd": true})
	assert.Equal(t, http.StatusNotFound, st)
	assert.Contains(t, string(raw), "Queue not found")
	st, _, raw = h.do("POST", "/api/v1/consumer-groups/g/queues/q/partitions/zz/seek", item{"toEnd": true})
	assert.Equal(t, http.StatusNotFound, st)
	assert.Contains(t, string(raw), "Partition not found")
}

type tGroupRow struct {
	Name              string   `json:"name"`
	QueueName         string   `json:"queueName"`
	Topics            []string `json:"topics"`
	Members           int      `json:"members"`
	PartitionsWithLag int      `json:"partitionsWithLag"`
	TotalLag          int      `json:"totalLag"`
	State             string   `json:"state"`
	SubscriptionMode  string   `json:"subscriptionMode"`
	Conflation        bool     `json:"conflation"`
}

func TestConsumerGroupListDetailDelete(t *testing.T) {
	h := newHC(t, Start(t))
	h.pushN("q1", "a", 3)
	h.pushN("q1", "b", 1)
	h.pushN("q2", "a", 1)
	p := h.popQ("q1", vals("consumerGroup", "g", "subscriptionMode", "all", "batch", "2"))
	h.ackAll(p, "g")
	h.popQ("q2", vals("consumerGroup", "g", "subscriptionMode", "all"))
	// A `new` group is listed once something was delivered to it.
	h.pop("/api/v1/pop/queue/q1", vals("consumerGroup", "other", "conflation", "true")) // registers, delivers nothing
	h.pushN("q1", "c", 1)
	h.popQ("q1", vals("consumerGroup", "other", "conflation", "true"))

	var rows []tGroupRow
	h.doJSON("GET", "/api/v1/consumer-groups", nil, http.StatusOK, &rows)
	byKey := map[string]tGroupRow{}
	for _, r := range rows {
		byKey[r.Name+"/"+r.QueueName] = r
	}
	g1 := byKey["g/q1"]
	assert.Equal(t, []string{"q1"}, g1.Topics)
	assert.Equal(t, 1, g1.Members, "one cursor row per partition popped: b was not")
	assert.Equal(t, 1, g1.TotalLag, "a's last message; b has no row to lag")
	assert.Equal(t, "Stable", g1.State)
	assert.Equal(t, "all", g1.SubscriptionMode)
	assert.Contains(t, byKey, "g/q2")
	assert.True(t, byKey["other/q1"].Conflation)
	assert.Equal(t, "new", byKey["other/q1"].SubscriptionMode)

	var detail map[string]struct {
		Conflation bool `json:"conflation"`
		Partitions []struct {
			Partition   string `json:"partition"`
			OffsetLag   int    `json:"offsetLag"`
			LeaseActive bool   `json:"leaseActive"`
		} `json:"partitions"`
	}
	h.doJSON("GET", "/api/v1/consumer-groups/g", nil, http.StatusOK, &detail)
	require.Contains(t, detail, "q1")
	require.Contains(t, detail, "q2")
	require.Len(t, detail["q1"].Partitions, 1)
	assert.Equal(t, "a", detail["q1"].Partitions[0].Partition)
	assert.Equal(t, 1, detail["q1"].Partitions[0].OffsetLag)
	assert.True(t, detail["q2"].Partitions[0].LeaseActive)
	h.doJSON("GET", "/api/v1/consumer-groups/ghost", nil, http.StatusNotFound, nil)

	// Delete on one queue, then everywhere.
	var del map[string]any
	h.doJSON("DELETE", "/api/v1/consumer-groups/g/queues/q1", nil, http.StatusOK, &del)
	assert.Equal(t, true, del["success"])
	assert.EqualValues(t, 1, del["deletedPartitions"], "cursor rows")
	assert.Equal(t, "q1", del["queueName"])
	assert.Equal(t, true, del["metadataDeleted"])
	detail = nil
	h.doJSON("GET", "/api/v1/consumer-groups/g", nil, http.StatusOK, &detail)
	assert.NotContains(t, detail, "q1")
	h.doJSON("DELETE", "/api/v1/consumer-groups/g", nil, http.StatusOK, &del)
	assert.Nil(t, del["queueName"])
	assert.EqualValues(t, 1, del["deletedPartitions"])
	h.doJSON("GET", "/api/v1/consumer-groups/g", nil, http.StatusNotFound, nil)

	// A deleted group registers afresh: `all` reads q1 from the start again.
	p = h.popQ("q1", vals("consumerGroup", "g", "subscriptionMode", "all", "batch", "100", "partitions", "3"))
	assert.Len(t, p.Messages, 5)
}

func TestHealthIsThe2xShape(t *testing.T) {
	h := newHC(t, Start(t))
	var out struct {
		Status  string `json:"status"`
		Engine  string `json:"engine"`
		Version string `json:"version"`
		Raft    struct {
			Role         string `json:"role"`
			Leader       bool   `json:"leader"`
			StorageReady bool   `json:"storageReady"`
		} `json:"raft"`
	}
	h.doJSON("GET", "/health", nil, http.StatusOK, &out)
	assert.Equal(t, "healthy", out.Status)
	assert.Equal(t, "raft", out.Engine)
	assert.NotEmpty(t, out.Version)
	assert.Equal(t, "leader", out.Raft.Role)
	assert.True(t, out.Raft.Leader)
	assert.True(t, out.Raft.StorageReady)
	h.doJSON("POST", "/api/v1/stats/refresh", nil, http.StatusOK, nil)
}

func TestUnknownRoutesAre404NoSuchRoute(t *testing.T) {
	h := newHC(t, Start(t))
	for _, c := range []struct{ method, path string }{
		{"GET", "/api/v1/nope"},
		{"GET", "/api/v1/push"},
		{"POST", "/api/v1/system/maintenance"},
		{"GET", "/"},
		{"DELETE", "/api/v1/pop/queue/q"},
	} {
		st, _, raw := h.do(c.method, c.path, nil)
		assert.Equal(t, http.StatusNotFound, st, c.path)
		var e map[string]string
		require.NoError(t, json.Unmarshal(raw, &e), c.path)
		assert.Equal(t, map[string]string{"code": "no_such_route", "error": "not found", "path": c.path}, e)
	}
}

// The 2.x depth view counts from a group's cursor row: a partition where
// the group has none (a mode-new group that registered after the
// partition's messages and never claimed it) counts from its first message,
// whatever the mode (depth_json, phase2.rs). Without a group, every
// registered named group must have a row on the partition, or it counts
// from its first message too.
func TestDepthCountsAPartitionWithoutACursorRowFromItsStart(t *testing.T) {
	clock := NewFakeClock(t0)
	h := newHC(t, Start(t, WithClock(clock)))
	h.pushN("q", "old", 3)
	clock.Advance(time.Second)
	h.popEmpty("q", vals("consumerGroup", "g", "subscriptionMode", "new", "batch", "10"))
	clock.Advance(time.Second)
	h.pushN("q", "fresh", 2)
	p := h.popQ("q", vals("consumerGroup", "g", "batch", "10"))
	require.Len(t, p.Messages, 2)
	h.ackAll(p, "g")

	type depth struct {
		Pending    int64 `json:"pending"`
		Partitions []struct {
			Partition string `json:"partition"`
			Pending   int64  `json:"pending"`
		} `json:"partitions"`
	}
	var d depth
	h.doJSON("GET", "/api/v1/resources/queues/q/depth?group=g", nil, http.StatusOK, &d)
	assert.EqualValues(t, 3, d.Pending, "%+v", d)
	require.Len(t, d.Partitions, 2)
	assert.Equal(t, "fresh", d.Partitions[0].Partition)
	assert.EqualValues(t, 0, d.Partitions[0].Pending)
	assert.EqualValues(t, 3, d.Partitions[1].Pending)

	// The group's views list the partition it has a row on only.
	var detail map[string]struct {
		Partitions []struct{ Partition string } `json:"partitions"`
	}
	h.doJSON("GET", "/api/v1/consumer-groups/g", nil, http.StatusOK, &detail)
	require.Len(t, detail["q"].Partitions, 1)
	assert.Equal(t, "fresh", detail["q"].Partitions[0].Partition)

	// Without a group: g has no row on old, so old counts from its start,
	// though the queue-mode cursor has passed it.
	qm := h.popQ("q", vals("batch", "10"))
	h.ackAll(qm, "")
	d = depth{}
	h.doJSON("GET", "/api/v1/resources/queues/q/depth", nil, http.StatusOK, &d)
	assert.EqualValues(t, 3, d.Pending, "%+v", d)
}
