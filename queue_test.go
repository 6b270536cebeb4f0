package queen

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCreateWire(t *testing.T) {
	tests := []struct {
		name   string
		create func(c *Client) *CreateBuilder
		body   string
	}{
		{
			// 0.15.1 fails a configure with no namespace, task or option
			// (and creates the queue anyway); 2.x ignores an empty namespace.
			name:   "no option at all: an empty namespace and options object travel",
			create: func(c *Client) *CreateBuilder { return c.Queue("orders").Create() },
			body:   `{"queue":"orders","namespace":"","options":{}}`,
		},
		{
			name: "every option of the configure route",
			create: func(c *Client) *CreateBuilder {
				return c.Queue("orders").Config(QueueConfig{
					LeaseTime: Ptr(30), RetryLimit: Ptr(5), RetryDelay: Ptr(2000), Priority: Ptr(3),
					DelayedProcessing: Ptr(10), WindowBuffer: Ptr(2), MaxSize: Ptr(10000), TTL: Ptr(86400),
					RetentionSeconds: Ptr(3600), CompletedRetentionSeconds: Ptr(600), RetentionEnabled: Ptr(true),
					DeadLetterQueue: Ptr(true), DLQAfterMaxRetries: Ptr(true), EncryptionEnabled: Ptr(false),
					MaxWaitTimeSeconds: Ptr(0), MinPopWaitTime: Ptr(250), DedupWindowSeconds: Ptr(7200),
					RetentionSinkHold: Ptr("lake-1"), RetentionSinkHoldMaxSeconds: Ptr(86400),
					Namespace: "shop", Task: "billing",
				}).Create()
			},
			body: `{"queue":"orders","namespace":"shop","task":"billing","options":{"leaseTime":30,"retryLimit":5,"retryDelay":2000,
				"priority":3,"delayedProcessing":10,"windowBuffer":2,"maxSize":10000,"ttl":86400,"retentionSeconds":3600,
				"completedRetentionSeconds":600,"retentionEnabled":true,"deadLetterQueue":true,"dlqAfterMaxRetries":true,
				"encryptionEnabled":false,"maxWaitTimeSeconds":0,"minPopWaitTime":250,"dedupWindowSeconds":7200,
				"retentionSinkHold":"lake-1","retentionSinkHoldMaxSeconds":86400}}`,
		},
		{
			name: "an empty sink hold is sent: it turns the hold off",
			create: func(c *Client) *CreateBuilder {
				return c.Queue("orders").Config(QueueConfig{RetentionSinkHold: Ptr("")}).Create()
			},
			body: `{"queue":"orders","options":{"retentionSinkHold":""}}`,
		},
		{
			name: "only a task",
			create: func(c *Client) *CreateBuilder {
				return c.Queue("orders").Config(QueueConfig{Task: "billing"}).Create()
			},
			body: `{"queue":"orders","task":"billing","options":{}}`,
		},
		{
			name: "options left nil are not sent (merge keeps them)",
			create: func(c *Client) *CreateBuilder {
				return c.Queue("orders").Config(QueueConfig{RetryLimit: Ptr(1)}).Create()
			},
			body: `{"queue":"orders","options":{"retryLimit":1}}`,
		},
		{
			name: "Replace",
			create: func(c *Client) *CreateBuilder {
				return c.Queue("orders").Config(QueueConfig{LeaseTime: Ptr(60)}).Create().Replace()
			},
			body: `{"queue":"orders","options":{"leaseTime":60},"mode":"replace"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, c := newRecorder(t, ok200(t, "broker-2.x/configure_ok.json"))
			_, err := tt.create(c).Execute(context.Background())
			require.NoError(t, err)
			r := rec.only(t)
			assert.Equal(t, http.MethodPost, r.Method)
			assert.Equal(t, "/api/v1/configure", r.Path)
			assert.Empty(t, r.RawQuery)
			assert.JSONEq(t, tt.body, string(r.Body))
		})
	}
}

func TestCreateAnswers(t *testing.T) {
	t.Run("2.x", func(t *testing.T) {
		_, c := newRecorder(t, ok200(t, "broker-2.x/configure_ok.json"))
		info, err := c.Queue("orders").Create().Execute(context.Background())
		require.NoError(t, err)
		assert.Equal(t, "orders", info.Name)
		assert.Equal(t, "shop", info.Config.Namespace)
		assert.Equal(t, "billing", info.Config.Task)
		assert.Equal(t, Ptr(45), info.Config.LeaseTime)
		assert.Equal(t, Ptr(5), info.Config.RetryLimit)
		assert.Equal(t, Ptr(true), info.Config.DeadLetterQueue)
		assert.Equal(t, Ptr(0), info.Config.MinPopWaitTime)
		assert.Equal(t, Ptr(3600), info.Config.DedupWindowSeconds)
		assert.Equal(t, Ptr(""), info.Config.RetentionSinkHold)
		assert.Equal(t, Ptr(604800), info.Config.RetentionSinkHoldMaxSeconds)
	})
	t.Run("0.15.1", func(t *testing.T) {
		_, c := newRecorder(t, ok200(t, "broker-0.15.1/configure_ok.json"))
		info, err := c.Queue("t1").Config(QueueConfig{LeaseTime: Ptr(30), RetryLimit: Ptr(3)}).Create().Execute(context.Background())
		require.NoError(t, err)
		assert.Equal(t, "t1", info.Name)
		assert.Equal(t, Ptr(30), info.Config.LeaseTime)
		assert.Equal(t, Ptr(3600), info.Config.TTL)
		assert.Empty(t, info.Config.Namespace)
	})
	for _, tt := range []struct {
		name   string
		answer answer
		status int
		msg    string
	}{
		{"0.15.1 error with HTTP 200", ok200(t, "broker-0.15.1/configure_no_options_error.json"), 200, "type_error.306"},
		{"0.15.1 400", answer{status: 400, body: golden(t, "broker-0.15.1/configure_400_queue_required.json")}, 400, "queue is required"},
		{"2.x 400 bad mode", answer{status: 400, body: golden(t, "broker-2.x/configure_400_bad_mode.json")}, 400, "mode must be"},
		{"200 that does not say configured", answer{status: 200, body: `{}`}, 200, "does not say configured"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, c := newRecorder(t, tt.answer)
			_, err := c.Queue("q").Create().Execute(context.Background())
			var be *BrokerError
			require.ErrorAs(t, err, &be)
			assert.Equal(t, tt.status, be.Status)
			assert.Contains(t, be.Message, tt.msg)
		})
	}
}

func TestDelete(t *testing.T) {
	tests := []struct {
		name string
		file string
		want DeleteResult
	}{
		{"existed", "broker-2.x/delete_existed.json", DeleteResult{Deleted: true, Existed: true}},
		{"did not exist: not an error", "broker-2.x/delete_missing.json", DeleteResult{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, c := newRecorder(t, ok200(t, tt.file))
			res, err := c.Queue("my queue").Delete().Execute(context.Background())
			require.NoError(t, err)
			assert.Equal(t, tt.want, res)
			r := rec.only(t)
			assert.Equal(t, http.MethodDelete, r.Method)
			assert.Equal(t, "/api/v1/resources/queues/my%20queue", r.Path)
			assert.Empty(t, r.Body)
		})
	}
	t.Run("error with HTTP 200", func(t *testing.T) {
		_, c := newRecorder(t, answer{status: 200, body: `{"error":"boom","success":false}`})
		_, err := c.Queue("q").Delete().Execute(context.Background())
		var be *BrokerError
		require.ErrorAs(t, err, &be)
		assert.Equal(t, "boom", be.Message)
	})
}
