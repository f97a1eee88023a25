package jetpool_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/broker"
)

// A cancelled record is counted apart from the failed ones, as status
// counts it: not in Failed, nor in the failed by class and by reason.
func TestSummaryCountsCancelledApart(t *testing.T) {
	var s jetpool.Summary
	s.Add(&broker.Result{ID: "r1", Status: broker.StatusOK})
	s.Add(&broker.Result{ID: "r2", Status: broker.StatusFailed, Reason: "auth", Error: &broker.ResultError{Class: "auth"}})
	s.Add(&broker.Result{ID: "r3", Status: broker.StatusCancelled, Reason: "cancelled"})
	s.Add(&broker.Result{ID: "r4", Status: broker.StatusCancelled, Reason: "cancelled"})
	assert.EqualValues(t, 4, s.Records)
	assert.EqualValues(t, 1, s.OK)
	assert.EqualValues(t, 1, s.Failed)
	assert.EqualValues(t, 2, s.Cancelled)
	assert.Equal(t, map[string]int64{"auth": 1}, s.ByReason)
	assert.Equal(t, map[string]int64{"auth": 1}, s.ByClass)
}
