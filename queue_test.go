package queen

import (
	"context"
	"math"
	"net/http"
	"testing"
	"time"

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
					LeaseTime: Ptr(30 * time.Second), RetryLimit: Ptr(5), RetryDelay: Ptr(2 * time.Second), Priority: Ptr(3),
					DelayedProcessing: Ptr(10 * time.Second), WindowBuffer: Ptr(2 * time.Second), MaxSize: Ptr(10000), TTL: Ptr(24 * time.Hour),
					Retention: Ptr(time.Hour), CompletedRetention: Ptr(10 * time.Minute), RetentionEnabled: Ptr(true),
					DeadLetterQueue: Ptr(true), DLQAfterMaxRetries: Ptr(true), EncryptionEnabled: Ptr(false),
					MaxWaitTime: Ptr(time.Duration(0)), MinPopWaitTime: Ptr(250 * time.Millisecond), DedupWindow: Ptr(2 * time.Hour),
					RetentionSinkHold: Ptr("lake-1"), RetentionSinkHoldMax: Ptr(24 * time.Hour),
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
			// Each duration in its broker's unit (seconds, or milliseconds
			// for retryDelay and minPopWaitTime), rounded up.
			name: "durations that are not whole units are rounded up",
			create: func(c *Client) *CreateBuilder {
				return c.Queue("orders").Config(QueueConfig{
					LeaseTime: Ptr(1500 * time.Millisecond), RetryDelay: Ptr(1500 * time.Microsecond),
					DelayedProcessing: Ptr(time.Nanosecond), WindowBuffer: Ptr(2*time.Second + time.Nanosecond),
					TTL: Ptr(time.Hour - time.Millisecond), Retention: Ptr(999 * time.Millisecond),
					CompletedRetention: Ptr(61 * time.Second / 2), MaxWaitTime: Ptr(time.Minute + 1),
					MinPopWaitTime: Ptr(time.Nanosecond), DedupWindow: Ptr(time.Microsecond),
					RetentionSinkHoldMax: Ptr(59*time.Second + time.Millisecond),
				}).Create()
			},
			body: `{"queue":"orders","options":{"leaseTime":2,"retryDelay":2,"delayedProcessing":1,"windowBuffer":3,"ttl":3600,
				"retentionSeconds":1,"completedRetentionSeconds":31,"maxWaitTimeSeconds":61,"minPopWaitTime":1,"dedupWindowSeconds":1,
				"retentionSinkHoldMaxSeconds":60}}`,
		},
		{
			// Unset is not sent (merge keeps the broker's value); zero is
			// sent as 0 (DedupWindow zero turns dedup off).
			name: "a zero duration is sent as 0, an unset one not at all",
			create: func(c *Client) *CreateBuilder {
				zero := time.Duration(0)
				return c.Queue("orders").Config(QueueConfig{
					LeaseTime: &zero, RetryDelay: &zero, DelayedProcessing: &zero, WindowBuffer: &zero, TTL: &zero,
					Retention: &zero, CompletedRetention: &zero, MaxWaitTime: &zero, MinPopWaitTime: &zero, DedupWindow: &zero,
				}).Create()
			},
			body: `{"queue":"orders","options":{"leaseTime":0,"retryDelay":0,"delayedProcessing":0,"windowBuffer":0,"ttl":0,
				"retentionSeconds":0,"completedRetentionSeconds":0,"maxWaitTimeSeconds":0,"minPopWaitTime":0,"dedupWindowSeconds":0}}`,
		},
		{
			name: "only DedupWindow zero: dedup off, nothing else touched",
			create: func(c *Client) *CreateBuilder {
				return c.Queue("orders").Config(QueueConfig{DedupWindow: Ptr(time.Duration(0))}).Create()
			},
			body: `{"queue":"orders","options":{"dedupWindowSeconds":0}}`,
		},
		{
			name: "the largest durations the broker stores",
			create: func(c *Client) *CreateBuilder {
				return c.Queue("orders").Config(QueueConfig{
					TTL: Ptr(math.MaxInt32 * time.Second), RetryDelay: Ptr(math.MaxInt32 * time.Millisecond),
				}).Create()
			},
			body: `{"queue":"orders","options":{"ttl":2147483647,"retryDelay":2147483647}}`,
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
				return c.Queue("orders").Config(QueueConfig{LeaseTime: Ptr(time.Minute)}).Create().Replace()
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
		assert.Equal(t, Ptr(45*time.Second), info.Config.LeaseTime)
		assert.Equal(t, Ptr(5), info.Config.RetryLimit)
		assert.Equal(t, Ptr(2*time.Second), info.Config.RetryDelay) // retryDelay is in milliseconds
		assert.Equal(t, Ptr(time.Hour), info.Config.TTL)
		assert.Equal(t, Ptr(time.Duration(0)), info.Config.Retention)
		assert.Equal(t, Ptr(true), info.Config.DeadLetterQueue)
		assert.Equal(t, Ptr(time.Duration(0)), info.Config.MinPopWaitTime)
		assert.Equal(t, Ptr(time.Hour), info.Config.DedupWindow)
		assert.Equal(t, Ptr(""), info.Config.RetentionSinkHold)
		assert.Equal(t, Ptr(7*24*time.Hour), info.Config.RetentionSinkHoldMax)
	})
	t.Run("0.15.1", func(t *testing.T) {
		_, c := newRecorder(t, ok200(t, "broker-0.15.1/configure_ok.json"))
		info, err := c.Queue("t1").Config(QueueConfig{LeaseTime: Ptr(30 * time.Second), RetryLimit: Ptr(3)}).Create().Execute(context.Background())
		require.NoError(t, err)
		assert.Equal(t, "t1", info.Name)
		assert.Equal(t, Ptr(30*time.Second), info.Config.LeaseTime)
		assert.Equal(t, Ptr(time.Second), info.Config.RetryDelay)
		assert.Equal(t, Ptr(time.Hour), info.Config.TTL)
		assert.Nil(t, info.Config.DedupWindow, "0.15.1 has no dedup window: not reported, not zero")
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
		{"0.15.1 existed", "broker-0.15.1/delete_existed.json", DeleteResult{Deleted: true, Existed: true}},
		// 0.15.1 says deleted:true for a queue it did not have.
		{"0.15.1 did not exist: nothing deleted", "broker-0.15.1/delete_missing.json", DeleteResult{}},
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

// Every duration of QueueConfig is refused before any request when it is
// negative or more than the broker stores (a 32-bit count of its unit,
// seconds or milliseconds), and accepted at the bounds.
func TestCreateRefusesDurations(t *testing.T) {
	const capSecondsField, capMillisField = math.MaxInt32 * time.Second, math.MaxInt32 * time.Millisecond
	fields := []struct {
		name string
		set  func(*QueueConfig, time.Duration)
		max  time.Duration
	}{
		{"LeaseTime", func(q *QueueConfig, d time.Duration) { q.LeaseTime = &d }, capSecondsField},
		{"RetryDelay", func(q *QueueConfig, d time.Duration) { q.RetryDelay = &d }, capMillisField},
		{"DelayedProcessing", func(q *QueueConfig, d time.Duration) { q.DelayedProcessing = &d }, capSecondsField},
		{"WindowBuffer", func(q *QueueConfig, d time.Duration) { q.WindowBuffer = &d }, capSecondsField},
		{"TTL", func(q *QueueConfig, d time.Duration) { q.TTL = &d }, capSecondsField},
		{"Retention", func(q *QueueConfig, d time.Duration) { q.Retention = &d }, capSecondsField},
		{"CompletedRetention", func(q *QueueConfig, d time.Duration) { q.CompletedRetention = &d }, capSecondsField},
		{"MaxWaitTime", func(q *QueueConfig, d time.Duration) { q.MaxWaitTime = &d }, capSecondsField},
		{"MinPopWaitTime", func(q *QueueConfig, d time.Duration) { q.MinPopWaitTime = &d }, capMillisField},
		{"DedupWindow", func(q *QueueConfig, d time.Duration) { q.DedupWindow = &d }, capSecondsField},
		{"RetentionSinkHoldMax", func(q *QueueConfig, d time.Duration) { q.RetentionSinkHoldMax = &d }, 365 * 24 * time.Hour},
	}
	unit := map[time.Duration]time.Duration{capSecondsField: time.Second, capMillisField: time.Millisecond, 365 * 24 * time.Hour: time.Second}
	for _, f := range fields {
		refuse := map[string]time.Duration{
			"negative":              -time.Nanosecond,
			"a unit over":           f.max + unit[f.max],
			"just over, rounded up": f.max + 1,
		}
		if f.name == "RetentionSinkHoldMax" {
			refuse["under a minute"] = 59 * time.Second
		}
		for what, d := range refuse {
			t.Run(f.name+"/"+what, func(t *testing.T) {
				rec, c := newRecorder(t)
				var cfg QueueConfig
				f.set(&cfg, d)
				_, err := c.Queue("orders").Config(cfg).Create().Execute(context.Background())
				require.ErrorIs(t, err, ErrInvalidOption)
				assert.ErrorIs(t, err, ErrInvalidArgument)
				assert.Contains(t, err.Error(), f.name)
				assert.Zero(t, rec.hits(), "nothing may be sent")
			})
		}
		t.Run(f.name+"/at the bound", func(t *testing.T) {
			rec, c := newRecorder(t, ok200(t, "broker-2.x/configure_ok.json"))
			var cfg QueueConfig
			f.set(&cfg, f.max)
			_, err := c.Queue("orders").Config(cfg).Create().Execute(context.Background())
			require.NoError(t, err)
			assert.Equal(t, 1, rec.hits())
		})
	}
}

// Each duration of a broker's answer is read in its own unit (seconds, or
// milliseconds for retryDelay and minPopWaitTime); one absent stays nil and
// a zero one is a pointer to zero.
func TestCreateAnswerUnits(t *testing.T) {
	_, c := newRecorder(t, answer{status: http.StatusOK, body: `{"configured":true,"queue":"orders","options":{
		"leaseTime":1,"retryDelay":2,"delayedProcessing":3,"windowBuffer":4,"ttl":5,"retentionSeconds":6,
		"completedRetentionSeconds":7,"maxWaitTimeSeconds":8,"minPopWaitTime":9,"dedupWindowSeconds":0}}`})
	info, err := c.Queue("orders").Create().Execute(context.Background())
	require.NoError(t, err)
	got := info.Config
	want := QueueConfig{
		LeaseTime: Ptr(time.Second), RetryDelay: Ptr(2 * time.Millisecond), DelayedProcessing: Ptr(3 * time.Second),
		WindowBuffer: Ptr(4 * time.Second), TTL: Ptr(5 * time.Second), Retention: Ptr(6 * time.Second),
		CompletedRetention: Ptr(7 * time.Second), MaxWaitTime: Ptr(8 * time.Second), MinPopWaitTime: Ptr(9 * time.Millisecond),
		DedupWindow: Ptr(time.Duration(0)),
	}
	assert.Equal(t, want, got, "RetentionSinkHoldMax is absent: nil")
}
