package queentest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
)

// QueueConfig is a queue's configuration: the options of
// POST /api/v1/configure, with the broker's units. The broker honours
// LeaseTime, RetryLimit, DeadLetterQueue / DLQAfterMaxRetries,
// DelayedProcessing, WindowBuffer and DedupWindowSeconds (WindowBuffer on
// the 2.x profile only); the other options are stored
// and reported back as the real broker does, without further effect in
// this in-memory broker. RetryDelay is one of them: neither real broker
// delays a redelivery by it (a client may, docs/RETRIES.md).
//
// Start from DefaultQueueConfig and change what you need: a zero field means
// zero (for example RetryLimit 0 dead-letters at the first failure), except
// LeaseTime, where zero or less means the default 60 seconds.
type QueueConfig struct {
	// LeaseTime is how long a pop leases its partition, in seconds.
	LeaseTime int
	// RetryLimit is how many `failed` acks a partition's consumer (group and
	// partition) may spend before a failed message is dead-lettered (or
	// dropped without a DLQ). As on the real brokers, the count goes on
	// across leases that end unfinished (a failed ack ends its lease
	// unfinished) and goes back to zero only when a lease of the partition
	// is finished or a message is dead-lettered, so failures of different
	// messages add up.
	RetryLimit int
	// RetryDelay is stored and reported, in milliseconds. The brokers do
	// not apply it: a batch released by a `failed` ack can be claimed again
	// at once (2.x rsm/consume/pop.rs claim_one; 0.15.1 never reads it).
	RetryDelay int
	// DelayedProcessing hides each message for this many seconds after its push.
	DelayedProcessing int
	// Priority is stored and reported.
	Priority int
	// WindowBuffer holds a partition from pops while its newest message is
	// younger than this many seconds (a burst is delivered as one batch).
	WindowBuffer int
	// MaxSize is stored and reported.
	MaxSize int
	// TTL is stored and reported, in seconds.
	TTL int
	// RetentionSeconds is stored and reported.
	RetentionSeconds int
	// CompletedRetentionSeconds is stored and reported.
	CompletedRetentionSeconds int
	// RetentionEnabled is stored and reported.
	RetentionEnabled bool
	// DeadLetterQueue files messages whose retries are spent (and `dlq`
	// acks) in the dead-letter queue. With both DeadLetterQueue and
	// DLQAfterMaxRetries false, a message past RetryLimit is dropped.
	DeadLetterQueue bool
	// DLQAfterMaxRetries enables the dead-letter queue like DeadLetterQueue.
	DLQAfterMaxRetries bool
	// EncryptionEnabled is stored and reported (payloads are kept in clear).
	EncryptionEnabled bool
	// MaxWaitTimeSeconds is stored and reported.
	MaxWaitTimeSeconds int
	// MinPopWaitTime is stored and reported (milliseconds, 0..60000).
	MinPopWaitTime int
	// DedupWindowSeconds is how long a pushed transactionId is remembered:
	// a push repeating one stored at most this many seconds before is
	// answered `duplicate`; after that, or with 0, it is stored again.
	// It also bounds how long a repeated `completed` ack is a no-op.
	DedupWindowSeconds int
	// RetentionSinkHold is stored and reported.
	RetentionSinkHold string
	// RetentionSinkHoldMaxSeconds is stored and reported.
	RetentionSinkHoldMaxSeconds int
}

// DefaultQueueConfig returns the configuration the real 2.x broker gives a
// queue created implicitly by a push: lease 60 s, retryLimit 3, retryDelay
// 1000 ms, ttl 3600 s, dead-letter queue on.
//
// Looked up upstream (queen-mq/queen, server/src/rsm/facade/real.rs,
// default_queue_config): lease_time 60, retry_limit 3, retry_delay 1000,
// ttl 3600, dead_letter_queue true, dlq_after_max_retries true,
// dedup_window_seconds 3600. This settles PROTOCOL.md's open point on the
// implicit-queue DLQ default: it is ON.
func DefaultQueueConfig() QueueConfig {
	return QueueConfig{
		LeaseTime:                   60,
		RetryLimit:                  3,
		RetryDelay:                  1000,
		TTL:                         3600,
		DeadLetterQueue:             true,
		DLQAfterMaxRetries:          true,
		DedupWindowSeconds:          3600,
		RetentionSinkHoldMaxSeconds: 604800,
	}
}

// configuredDefaults is the base of a configure that creates a queue or
// replaces its options (upstream phase2.rs configured_defaults): as the
// implicit defaults, but with a 300 s lease.
func configuredDefaults() QueueConfig {
	c := DefaultQueueConfig()
	c.LeaseTime = 300
	return c
}

func (c QueueConfig) dlqEnabled() bool { return c.DeadLetterQueue || c.DLQAfterMaxRetries }

func (c QueueConfig) leaseSeconds() int {
	if c.LeaseTime <= 0 {
		return 60
	}
	return c.LeaseTime
}

// optionsJSON is the "options" object of the configure reply and of the
// queue resource views, every option present.
type optionsJSON struct {
	Priority                    int    `json:"priority"`
	LeaseTime                   int    `json:"leaseTime"`
	RetryLimit                  int    `json:"retryLimit"`
	RetryDelay                  int    `json:"retryDelay"`
	MaxSize                     int    `json:"maxSize"`
	TTL                         int    `json:"ttl"`
	DeadLetterQueue             bool   `json:"deadLetterQueue"`
	DLQAfterMaxRetries          bool   `json:"dlqAfterMaxRetries"`
	DelayedProcessing           int    `json:"delayedProcessing"`
	WindowBuffer                int    `json:"windowBuffer"`
	RetentionSeconds            int    `json:"retentionSeconds"`
	CompletedRetentionSeconds   int    `json:"completedRetentionSeconds"`
	RetentionEnabled            bool   `json:"retentionEnabled"`
	EncryptionEnabled           bool   `json:"encryptionEnabled"`
	MaxWaitTimeSeconds          int    `json:"maxWaitTimeSeconds"`
	MinPopWaitTime              int    `json:"minPopWaitTime"`
	DedupWindowSeconds          int    `json:"dedupWindowSeconds"`
	RetentionSinkHold           string `json:"retentionSinkHold"`
	RetentionSinkHoldMaxSeconds int    `json:"retentionSinkHoldMaxSeconds"`
}

func (c QueueConfig) options() optionsJSON {
	return optionsJSON{
		Priority:                    c.Priority,
		LeaseTime:                   c.LeaseTime,
		RetryLimit:                  c.RetryLimit,
		RetryDelay:                  c.RetryDelay,
		MaxSize:                     c.MaxSize,
		TTL:                         c.TTL,
		DeadLetterQueue:             c.DeadLetterQueue,
		DLQAfterMaxRetries:          c.DLQAfterMaxRetries,
		DelayedProcessing:           c.DelayedProcessing,
		WindowBuffer:                c.WindowBuffer,
		RetentionSeconds:            c.RetentionSeconds,
		CompletedRetentionSeconds:   c.CompletedRetentionSeconds,
		RetentionEnabled:            c.RetentionEnabled,
		EncryptionEnabled:           c.EncryptionEnabled,
		MaxWaitTimeSeconds:          c.MaxWaitTimeSeconds,
		MinPopWaitTime:              c.MinPopWaitTime,
		DedupWindowSeconds:          c.DedupWindowSeconds,
		RetentionSinkHold:           c.RetentionSinkHold,
		RetentionSinkHoldMaxSeconds: c.RetentionSinkHoldMaxSeconds,
	}
}

// applyOptions sets every option present in o on c, with the real broker's
// validation (phase2.rs apply_config_options): integers must be JSON
// integers that fit 32 bits, booleans must be booleans (an explicit null is
// refused like any other wrong type). namespace and task are returned when
// present (a non-string reads as "").
func applyOptions(c *QueueConfig, o map[string]json.RawMessage) (namespace, task *string, err error) {
	str := func(k string) *string {
		raw, ok := o[k]
		if !ok {
			return nil
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			s = ""
		}
		return &s
	}
	integer := func(k string, dst *int) error {
		raw, ok := o[k]
		if !ok {
			return nil
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 || raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
			return fmt.Errorf("%s must be an integer", k)
		}
		var n json.Number
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if dec.Decode(&n) != nil {
			return fmt.Errorf("%s must be an integer", k)
		}
		v, perr := n.Int64()
		if perr != nil || v < math.MinInt32 || v > math.MaxInt32 {
			return fmt.Errorf("%s must be an integer", k)
		}
		*dst = int(v)
		return nil
	}
	boolean := func(k string, dst *bool) error {
		raw, ok := o[k]
		if !ok {
			return nil
		}
		var b bool
		if t := bytes.TrimSpace(raw); bytes.Equal(t, []byte("null")) || json.Unmarshal(t, &b) != nil {
			return fmt.Errorf("%s must be a boolean", k)
		}
		*dst = b
		return nil
	}
	namespace, task = str("namespace"), str("task")
	ints := []struct {
		k string
		p *int
	}{
		{"priority", &c.Priority}, {"leaseTime", &c.LeaseTime}, {"retryLimit", &c.RetryLimit},
		{"retryDelay", &c.RetryDelay}, {"maxSize", &c.MaxSize}, {"ttl", &c.TTL},
		{"delayedProcessing", &c.DelayedProcessing}, {"windowBuffer", &c.WindowBuffer},
		{"retentionSeconds", &c.RetentionSeconds}, {"completedRetentionSeconds", &c.CompletedRetentionSeconds},
		{"maxWaitTimeSeconds", &c.MaxWaitTimeSeconds}, {"minPopWaitTime", &c.MinPopWaitTime},
		{"dedupWindowSeconds", &c.DedupWindowSeconds}, {"retentionSinkHoldMaxSeconds", &c.RetentionSinkHoldMaxSeconds},
	}
	for _, f := range ints {
		if err := integer(f.k, f.p); err != nil {
			return nil, nil, err
		}
	}
	bools := []struct {
		k string
		p *bool
	}{
		{"deadLetterQueue", &c.DeadLetterQueue}, {"dlqAfterMaxRetries", &c.DLQAfterMaxRetries},
		{"retentionEnabled", &c.RetentionEnabled}, {"encryptionEnabled", &c.EncryptionEnabled},
	}
	for _, f := range bools {
		if err := boolean(f.k, f.p); err != nil {
			return nil, nil, err
		}
	}
	c.MinPopWaitTime = min(max(c.MinPopWaitTime, 0), 60000)
	c.DedupWindowSeconds = max(c.DedupWindowSeconds, 0)
	if s := str("retentionSinkHold"); s != nil {
		c.RetentionSinkHold = *s
	}
	if len(c.RetentionSinkHold) > 64 || !sinkHoldOK(c.RetentionSinkHold) {
		return nil, nil, fmt.Errorf("retentionSinkHold must match [A-Za-z0-9._-]{0,64}")
	}
	if c.RetentionSinkHoldMaxSeconds < 60 || c.RetentionSinkHoldMaxSeconds > 31536000 {
		return nil, nil, fmt.Errorf("retentionSinkHoldMaxSeconds must be between 60 and 31536000")
	}
	return namespace, task, nil
}

func sinkHoldOK(s string) bool {
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_'
		if !ok {
			return false
		}
	}
	return true
}

// defaultQueueConfig015 is the configuration 0.15.1 gives a queue created by
// a push (the column defaults of queen.queues): lease 300 s, retryLimit 3,
// retryDelay 1000 ms (stored, never applied), ttl 3600 s, no dead-letter
// queue flag (0.15.1 dead-letters whatever the flag says).
func defaultQueueConfig015() QueueConfig {
	return QueueConfig{LeaseTime: 300, RetryLimit: 3, RetryDelay: 1000, TTL: 3600}
}
