package queen

// SetMinRenewMillis lowers the shortest RenewLease interval c's consume
// loops take, so that the package's tests can renew every few
// milliseconds. It exists only in test builds.
func SetMinRenewMillis(c *Client, ms int) { c.minRenewMs = ms }
