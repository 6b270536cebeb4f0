package queen

// SetMinRenewMillis lowers the shortest RenewLease interval c's consume
// loops take, so that the package's tests can renew every few
// milliseconds. It exists only in test builds.
func SetMinRenewMillis(c *Client, ms int) { c.minRenewMs = ms }

// ProducerClock is a Producer's clock: SetProducerClock gives p the
// test's, before p's first Push. ProbeEvery is how often a producer whose
// broker is down sends a probe.
type ProducerClock = clock

func SetProducerClock(p *Producer, c ProducerClock) { p.e.clock = c }

const ProbeEvery = probeEvery

// AnswerOnItsWay is how long a stop waits for the pops already on the wire
// before it abandons them, and AbandonNoticed how long the acks it holds
// back then wait, for the tests of the queen_test package.
const (
	AnswerOnItsWay = answerOnItsWay
	AbandonNoticed = abandonNoticed
)
