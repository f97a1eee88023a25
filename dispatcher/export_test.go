package dispatcher

import "time"

// SetLeaseTimes shortens the lease's times for a test and returns what
// puts them back.
func SetLeaseTimes(renew, fence, idle, look time.Duration) (restore func()) {
	r, f, i, l := leaseRenew, leaseFence, leaseIdle, leaseLook
	leaseRenew, leaseFence, leaseIdle, leaseLook = renew, fence, idle, look
	return func() { leaseRenew, leaseFence, leaseIdle, leaseLook = r, f, i, l }
}
