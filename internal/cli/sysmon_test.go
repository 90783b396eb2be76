package cli

import (
	"slices"
	"testing"
)

func TestWithSchedTrace(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want []string // nil: left as it is
	}{
		{[]string{"PATH=/bin"}, []string{"PATH=/bin", "GODEBUG=" + schedTraceEnv}},
		{[]string{"GODEBUG=", "A=b"}, []string{"GODEBUG=" + schedTraceEnv, "A=b"}},
		{[]string{"GODEBUG=madvdontneed=1", "A=b"}, []string{"GODEBUG=madvdontneed=1," + schedTraceEnv, "A=b"}},
		{[]string{"GODEBUG=schedtrace=0"}, nil},
		{[]string{"GODEBUG=gctrace=1, schedtrace=100"}, nil},
		{[]string{"GODEBUG=scheddetail=1"}, []string{"GODEBUG=scheddetail=1," + schedTraceEnv}},
	} {
		got, changed := withSchedTrace(slices.Clone(tc.env))
		if tc.want == nil {
			if changed || !slices.Equal(got, tc.env) {
				t.Errorf("%q: got %q (changed %v), want it left as it is", tc.env, got, changed)
			}
			continue
		}
		if !changed || !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %q (changed %v), want %q", tc.env, got, changed, tc.want)
		}
	}
}
