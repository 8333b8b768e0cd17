package require_test

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/effectively-once/watermill-inbox/internal/require"
)

// recorder is a TB that records a failure instead of ending the test, so each case can check both outcomes.
type recorder struct{ failure string }

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failure = fmt.Sprintf(format, args...)
}

type point struct{ X, Y int }

type myInt int64

// Every assertion, once with values for which it holds and once with values for which it does not: the first
// must record nothing, the second a failure that carries the message given to it.
func TestAssertions_HoldAndFail(t *testing.T) {
	wrapped := fmt.Errorf("read: %w", errSentinel)
	p := &point{1, 2}
	now := time.Now()
	cases := []struct {
		name       string
		pass, fail func(t require.TB)
	}{
		{"NoError", func(t require.TB) { require.NoError(t, nil, "msg") }, func(t require.TB) { require.NoError(t, errSentinel, "msg") }},
		{"Error", func(t require.TB) { require.Error(t, errSentinel, "msg") }, func(t require.TB) { require.Error(t, nil, "msg") }},
		{"ErrorIs", func(t require.TB) { require.ErrorIs(t, wrapped, errSentinel, "msg") }, func(t require.TB) { require.ErrorIs(t, errors.New("x"), errSentinel, "msg") }},
		{"NotErrorIs", func(t require.TB) { require.NotErrorIs(t, errors.New("x"), errSentinel, "msg") }, func(t require.TB) { require.NotErrorIs(t, wrapped, errSentinel, "msg") }},
		{"ErrorContains", func(t require.TB) { require.ErrorContains(t, wrapped, "read", "msg") }, func(t require.TB) { require.ErrorContains(t, wrapped, "write", "msg") }},
		{"ErrorContains/nil", func(t require.TB) { require.ErrorContains(t, wrapped, "sentinel", "msg") }, func(t require.TB) { require.ErrorContains(t, nil, "read", "msg") }},
		{"Equal", func(t require.TB) { require.Equal(t, []point{{1, 2}}, []point{{1, 2}}, "msg") }, func(t require.TB) { require.Equal(t, int64(1), 1, "msg") }},
		{"Equal/bytes", func(t require.TB) { require.Equal(t, []byte("ab"), []byte("ab"), "msg") }, func(t require.TB) { require.Equal(t, []byte("ab"), "ab", "msg") }},
		{"NotEqual", func(t require.TB) { require.NotEqual(t, 1, 2, "msg") }, func(t require.TB) { require.NotEqual(t, "a", "a", "msg") }},
		{"EqualValues", func(t require.TB) { require.EqualValues(t, 3, myInt(3), "msg") }, func(t require.TB) { require.EqualValues(t, 3, uint8(4), "msg") }},
		{"EqualValues/negative", func(t require.TB) { require.EqualValues(t, -1, int8(-1), "msg") }, func(t require.TB) { require.EqualValues(t, -1, uint64(1), "msg") }},
		{"EqualValues/float", func(t require.TB) { require.EqualValues(t, 2, 2.0, "msg") }, func(t require.TB) { require.EqualValues(t, 2, 2.5, "msg") }},
		{"EqualValues/converted", func(t require.TB) { require.EqualValues(t, "a", myString("a"), "msg") }, func(t require.TB) { require.EqualValues(t, 97, "a", "msg") }},
		{"ElementsMatch", func(t require.TB) { require.ElementsMatch(t, []string{"a", "b", "a"}, []string{"a", "a", "b"}, "msg") }, func(t require.TB) { require.ElementsMatch(t, []string{"a", "b", "b"}, []string{"a", "a", "b"}, "msg") }},
		{"Same", func(t require.TB) { require.Same(t, p, p, "msg") }, func(t require.TB) { require.Same(t, p, &point{1, 2}, "msg") }},
		{"Nil", func(t require.TB) { require.Nil(t, (*point)(nil), "msg") }, func(t require.TB) { require.Nil(t, p, "msg") }},
		{"NotNil", func(t require.TB) { require.NotNil(t, p, "msg") }, func(t require.TB) { require.NotNil(t, []int(nil), "msg") }},
		{"True", func(t require.TB) { require.True(t, true, "msg") }, func(t require.TB) { require.True(t, false, "msg") }},
		{"False", func(t require.TB) { require.False(t, false, "msg") }, func(t require.TB) { require.False(t, true, "msg") }},
		{"Zero", func(t require.TB) { require.Zero(t, point{}, "msg") }, func(t require.TB) { require.Zero(t, point{X: 1}, "msg") }},
		{"NotZero", func(t require.TB) { require.NotZero(t, 1, "msg") }, func(t require.TB) { require.NotZero(t, "", "msg") }},
		{"Empty", func(t require.TB) { require.Empty(t, map[string]int{}, "msg") }, func(t require.TB) { require.Empty(t, []int{0}, "msg") }},
		{"Empty/pointer", func(t require.TB) { require.Empty(t, &point{}, "msg") }, func(t require.TB) { require.Empty(t, p, "msg") }},
		{"NotEmpty", func(t require.TB) { require.NotEmpty(t, "x", "msg") }, func(t require.TB) { require.NotEmpty(t, []string{}, "msg") }},
		{"Len", func(t require.TB) { require.Len(t, map[int]bool{1: true}, 1, "msg") }, func(t require.TB) { require.Len(t, "abc", 2, "msg") }},
		{"Len/no length", func(t require.TB) { require.Len(t, []int{}, 0, "msg") }, func(t require.TB) { require.Len(t, 3, 0, "msg") }},
		{"Contains/string", func(t require.TB) { require.Contains(t, "abc", "bc", "msg") }, func(t require.TB) { require.Contains(t, "abc", "cd", "msg") }},
		{"Contains/slice", func(t require.TB) { require.Contains(t, []point{{1, 2}}, point{1, 2}, "msg") }, func(t require.TB) { require.Contains(t, []point{{1, 2}}, point{2, 1}, "msg") }},
		{"Contains/map", func(t require.TB) { require.Contains(t, map[string]int{"k": 1}, "k", "msg") }, func(t require.TB) { require.Contains(t, map[string]int{"k": 1}, "v", "msg") }},
		{"Contains/mismatch", func(t require.TB) { require.Contains(t, "1", "1", "msg") }, func(t require.TB) { require.Contains(t, "1", 1, "msg") }},
		{"NotContains", func(t require.TB) { require.NotContains(t, []string{"a"}, "b", "msg") }, func(t require.TB) { require.NotContains(t, "abc", "a", "msg") }},
		{"Subset", func(t require.TB) { require.Subset(t, []int{1, 2, 3}, []int{3, 1}, "msg") }, func(t require.TB) { require.Subset(t, []int{1, 2}, []int{2, 4}, "msg") }},
		{"Regexp", func(t require.TB) { require.Regexp(t, `^a+$`, "aaa", "msg") }, func(t require.TB) { require.Regexp(t, regexp.MustCompile(`^a+$`), "ab", "msg") }},
		{"NotRegexp", func(t require.TB) { require.NotRegexp(t, `b`, "aaa", "msg") }, func(t require.TB) { require.NotRegexp(t, `b`, "ab", "msg") }},
		{"Greater", func(t require.TB) { require.Greater(t, 2, 1, "msg") }, func(t require.TB) { require.Greater(t, 1, 1, "msg") }},
		{"GreaterOrEqual", func(t require.TB) { require.GreaterOrEqual(t, time.Second, time.Second, "msg") }, func(t require.TB) { require.GreaterOrEqual(t, time.Millisecond, time.Second, "msg") }},
		{"Less", func(t require.TB) { require.Less(t, "a", "b", "msg") }, func(t require.TB) { require.Less(t, "b", "a", "msg") }},
		{"LessOrEqual", func(t require.TB) { require.LessOrEqual(t, int64(2), 2, "msg") }, func(t require.TB) { require.LessOrEqual(t, int64(3), 2, "msg") }},
		{"Positive", func(t require.TB) { require.Positive(t, time.Nanosecond, "msg") }, func(t require.TB) { require.Positive(t, 0, "msg") }},
		{"InDelta", func(t require.TB) { require.InDelta(t, 10, 10.5, 1, "msg") }, func(t require.TB) { require.InDelta(t, 10, 12, 1, "msg") }},
		{"WithinDuration", func(t require.TB) { require.WithinDuration(t, now, now.Add(-time.Second), time.Second, "msg") }, func(t require.TB) { require.WithinDuration(t, now, now.Add(2*time.Second), time.Second, "msg") }},
		{"Panics", func(t require.TB) { require.Panics(t, func() { panic("x") }, "msg") }, func(t require.TB) { require.Panics(t, func() {}, "msg") }},
		{"PanicsWithValue", func(t require.TB) { require.PanicsWithValue(t, "x", func() { panic("x") }, "msg") }, func(t require.TB) { require.PanicsWithValue(t, "x", func() { panic("y") }, "msg") }},
		{"NotPanics", func(t require.TB) { require.NotPanics(t, func() {}, "msg") }, func(t require.TB) { require.NotPanics(t, func() { panic("x") }, "msg") }},
		{"Eventually", func(t require.TB) {
			n := 0
			require.Eventually(t, func() bool { n++; return n == 3 }, time.Minute, time.Microsecond, "msg")
		}, func(t require.TB) { require.Eventually(t, func() bool { return false }, 0, time.Microsecond, "msg") }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var pass, fail recorder
			c.pass(&pass)
			if pass.failure != "" {
				t.Errorf("failed where it holds: %s", pass.failure)
			}
			c.fail(&fail)
			if fail.failure == "" {
				t.Errorf("held where it does not")
			} else if !strings.HasSuffix(fail.failure, "\n\tmsg") {
				t.Errorf("the failure lacks the message given: %q", fail.failure)
			}
		})
	}
}

// A message given as a format and its arguments is formatted; other values are printed.
func TestMessage_FormatsItsArguments(t *testing.T) {
	var r recorder
	require.True(&r, false, "%d of %s", 3, "four")
	if !strings.HasSuffix(r.failure, "\n\t3 of four") {
		t.Errorf("got %q", r.failure)
	}
	require.True(&r, false, 42)
	if !strings.HasSuffix(r.failure, "\n\t42") {
		t.Errorf("got %q", r.failure)
	}
}

var errSentinel = errors.New("sentinel")

type myString string
