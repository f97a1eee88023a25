package deadletter_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/deadletter"
)

func TestFilterCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		f    deadletter.Filter
		want string // "" for no error
	}{
		{deadletter.Filter{}, ""},
		{deadletter.Filter{Job: "quickstart-1a2b", Action: "summarize", Reason: "permanent", Class: "auth"}, ""},
		{deadletter.Filter{Reason: "nope"}, `reason "nope": want one of`},
		{deadletter.Filter{Class: "nope"}, `class "nope": want one of`},
		{deadletter.Filter{Job: "a.b"}, `job "a.b" is not a valid job id`},
		{deadletter.Filter{Action: ">"}, `action ">" is not a valid action name`},
		{deadletter.Filter{Action: "*"}, `action "*" is not a valid action name`},
	} {
		err := tc.f.Check()
		if tc.want == "" {
			require.NoError(t, err, "%+v", tc.f)
			continue
		}
		require.ErrorContains(t, err, tc.want, "%+v", tc.f)
	}
}
