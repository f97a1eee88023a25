package retry_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/retry"
)

// Where processes die mid-call, each of up to LostDeliveriesMax deliveries
// lost with them may have made a delivery's calls that nothing recorded;
// max_calls caps what one delivery's session makes.
func TestBoundKilled(t *testing.T) {
	on := retry.Policy{Enabled: true, MaxAttempts: 3, MaxDeliveries: 3}
	b := retry.Action{Policy: on}.Bound()
	require.Equal(t, 9, b.Calls)
	require.Equal(t, 9+(retry.LostBeforeAlone+retry.LostDeliveriesMax)*3, b.Killed)

	b = retry.Action{Policy: on, Repairs: 1, MaxCalls: 4}.Bound()
	require.Equal(t, 4, b.Calls)
	require.Equal(t, 4+(retry.LostBeforeAlone+retry.LostDeliveriesMax)*4, b.Killed, "a lost delivery's session is cut to max_calls")

	b = retry.Action{}.Bound() // retry off
	require.Equal(t, 1, b.Calls)
	require.Equal(t, 1+retry.LostBeforeAlone+retry.LostDeliveriesMax, b.Killed)
}
