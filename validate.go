package queen

import (
	"fmt"
	"time"
)

// Bounds of QueueBuilder options that no broker needs and that can only
// hurt (the others are MaxPartitions and MaxTimeoutMillis).
const (
	// MaxBatch is the largest Batch, ten times the broker's own autopilot
	// maximum: the broker does not clamp it.
	MaxBatch = 10000
	// MinRenewMillis is the shortest RenewLease interval: four renewals in
	// the shortest lease (1 s).
	MinRenewMillis = 250
)

// Each operation checks only the options it uses, when it runs; setters
// only record, so a later call replaces an earlier bad value. Every error
// matches ErrInvalidArgument.

// checkPop checks the names, the pop options and the subscription.
func (b *QueueBuilder) checkPop() error {
	discover := b.queue == "" && (b.namespace != "" || b.task != "")
	if !discover {
		if err := checkName(queueName, b.queue); err != nil {
			return err
		}
		if err := checkOptionalName(partitionName, b.partition); err != nil {
			return err
		}
	}
	if err := checkOptionalName(groupName, b.group); err != nil {
		return err
	}
	if b.queue != "" && b.task != "" {
		return fmt.Errorf("%w: Task(%q) narrows a discovery pop (Client.Namespace or Client.Task), not a pop of queue %q",
			ErrInvalidOption, b.task, b.queue)
	}
	if b.conflation && b.group == "" {
		return ErrConflationNeedsGroup
	}
	if b.conflation && b.commitOnDelivery {
		return ErrConflationWithCommitOnDelivery
	}
	if b.partitionsSet && (b.partitions < 1 || b.partitions > MaxPartitions) {
		return fmt.Errorf("%w: got %d", ErrPartitionsOutOfRange, b.partitions)
	}
	if b.batch < 0 {
		return fmt.Errorf("%w: got %d", ErrNegativeBatch, b.batch)
	}
	if b.batch > MaxBatch {
		return fmt.Errorf("%w: Batch(%d) is more than MaxBatch (%d)", ErrInvalidOption, b.batch, MaxBatch)
	}
	if b.timeoutSet && (b.timeoutMs < 0 || b.timeoutMs > MaxTimeoutMillis) {
		return fmt.Errorf("%w: got %d", ErrTimeoutOutOfRange, b.timeoutMs)
	}
	if _, err := brokerUnits("LeaseTime", b.lease, time.Second); err != nil {
		return err
	}
	switch b.subMode {
	case "", SubscriptionModeNew, SubscriptionModeAll:
	default:
		return fmt.Errorf("%w: mode %q", ErrInvalidSubscription, b.subMode)
	}
	if b.group == "" && (b.subMode == SubscriptionModeNew || b.subFrom != "") {
		// Queue mode has no start point: refuse rather than drop it.
		return fmt.Errorf("%w: SubscriptionMode(new) and SubscriptionFrom apply to a consumer group; set Group", ErrInvalidSubscription)
	}
	if b.subFrom != "" && b.subFrom != "now" {
		if _, err := time.Parse(time.RFC3339Nano, b.subFrom); err != nil {
			return fmt.Errorf("%w: SubscriptionFrom(%q) is not an RFC 3339 time", ErrInvalidSubscription, b.subFrom)
		}
	}
	return nil
}

// checkConsume checks what a pop uses and the loop's own options.
func (b *QueueBuilder) checkConsume() error {
	if b.commitOnDelivery {
		return ErrCommitOnDeliveryConsume
	}
	if b.concurrencySet && b.concurrency < 1 {
		return fmt.Errorf("%w: Concurrency(%d) must be at least 1", ErrInvalidOption, b.concurrency)
	}
	if b.limit < 0 {
		return fmt.Errorf("%w: Limit(%d) must not be negative", ErrInvalidOption, b.limit)
	}
	if b.idleMs < 0 {
		return fmt.Errorf("%w: IdleMillis(%d) must not be negative", ErrInvalidOption, b.idleMs)
	}
	if minRenew := b.minRenewMillis(); b.renew && b.renewMs < minRenew {
		return fmt.Errorf("%w: RenewLease interval %d ms is less than MinRenewMillis (%d)", ErrInvalidOption, b.renewMs, minRenew)
	}
	return b.checkPop()
}

func (b *QueueBuilder) checkPush() error {
	if err := checkName(queueName, b.queue); err != nil {
		return err
	}
	return checkOptionalName(partitionName, b.partition)
}

func (b *QueueBuilder) checkCreate() error {
	if err := checkName(queueName, b.queue); err != nil {
		return err
	}
	if b.config != nil {
		return b.config.validate()
	}
	return nil
}

// checkFetch: "" is the Default partition.
func (b *QueueBuilder) checkFetch(partitions []string) error {
	if err := checkName(queueName, b.queue); err != nil {
		return err
	}
	for _, p := range partitions {
		if err := checkOptionalName(partitionName, p); err != nil {
			return err
		}
	}
	return nil
}

// minRenewMillis is MinRenewMillis, or a lower bound the package's tests set.
func (b *QueueBuilder) minRenewMillis() int {
	if b.c != nil && b.c.minRenewMs > 0 {
		return b.c.minRenewMs
	}
	return MinRenewMillis
}
