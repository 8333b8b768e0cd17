// Package require holds the assertions the root module's tests and its driver suite (inboxtest) use. Each one
// stops the test with t.FailNow when it does not hold, like testify's package of the same name, whose names and
// argument order it keeps so that a reader who knows that package reads these. It lives here so that the root
// module requires no assertion library: a user's go.mod inherits nothing from the module's own tests.
//
// Every function takes optional msgAndArgs: a format string and its arguments, or any values, printed after the
// failure.
package require

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strings"
	"time"
)

// TB is the part of testing.TB the assertions use.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

func fail(t TB, failure string, msgAndArgs []any) {
	t.Helper()
	if m := message(msgAndArgs); m != "" {
		failure += "\n\t" + m
	}
	t.Fatalf("%s", failure)
}

func message(msgAndArgs []any) string {
	if len(msgAndArgs) == 0 {
		return ""
	}
	if format, ok := msgAndArgs[0].(string); ok {
		if len(msgAndArgs) == 1 {
			return format
		}
		return fmt.Sprintf(format, msgAndArgs[1:]...)
	}
	return fmt.Sprint(msgAndArgs...)
}

func show(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%#v", v)
}

// NoError requires err to be nil.
func NoError(t TB, err error, msgAndArgs ...any) {
	t.Helper()
	if err != nil {
		fail(t, fmt.Sprintf("unexpected error: %v", err), msgAndArgs)
	}
}

// Error requires err to be non-nil.
func Error(t TB, err error, msgAndArgs ...any) {
	t.Helper()
	if err == nil {
		fail(t, "an error was expected, got nil", msgAndArgs)
	}
}

// ErrorIs requires errors.Is(err, target).
func ErrorIs(t TB, err, target error, msgAndArgs ...any) {
	t.Helper()
	if !errors.Is(err, target) {
		fail(t, fmt.Sprintf("error %v is not %v", err, target), msgAndArgs)
	}
}

// NotErrorIs requires !errors.Is(err, target).
func NotErrorIs(t TB, err, target error, msgAndArgs ...any) {
	t.Helper()
	if errors.Is(err, target) {
		fail(t, fmt.Sprintf("error %v is %v", err, target), msgAndArgs)
	}
}

// ErrorContains requires a non-nil err whose text contains substr.
func ErrorContains(t TB, err error, substr string, msgAndArgs ...any) {
	t.Helper()
	if err == nil {
		fail(t, fmt.Sprintf("an error containing %q was expected, got nil", substr), msgAndArgs)
		return
	}
	if !strings.Contains(err.Error(), substr) {
		fail(t, fmt.Sprintf("error %q does not contain %q", err.Error(), substr), msgAndArgs)
	}
}

// equal reports whether two values are deeply equal; byte slices compare by their bytes.
func equal(expected, actual any) bool {
	if expected == nil || actual == nil {
		return expected == actual
	}
	if e, ok := expected.([]byte); ok {
		a, ok := actual.([]byte)
		return ok && bytes.Equal(e, a)
	}
	return reflect.DeepEqual(expected, actual)
}

// Equal requires reflect.DeepEqual(expected, actual).
func Equal(t TB, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	if !equal(expected, actual) {
		fail(t, fmt.Sprintf("not equal:\n\texpected: %s\n\tactual:   %s", show(expected), show(actual)), msgAndArgs)
	}
}

// NotEqual requires the values to differ.
func NotEqual(t TB, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	if equal(expected, actual) {
		fail(t, fmt.Sprintf("both are %s", show(actual)), msgAndArgs)
	}
}

// equalValues reports whether the values are equal, or equal once converted to one type: numbers by value,
// whatever their types, and other values converted to the actual one's type.
func equalValues(expected, actual any) bool {
	if equal(expected, actual) {
		return true
	}
	if expected == nil || actual == nil {
		return false
	}
	ev, av := reflect.ValueOf(expected), reflect.ValueOf(actual)
	if en, ok := number(ev); ok {
		an, ok := number(av)
		return ok && en == an
	}
	if isNumberKind(av.Kind()) || !ev.CanConvert(av.Type()) {
		return false
	}
	return reflect.DeepEqual(ev.Convert(av.Type()).Interface(), actual)
}

// num holds an integer exactly, or a float.
type num struct {
	neg   bool
	abs   uint64
	float float64
	isF   bool
}

func number(v reflect.Value) (num, bool) {
	switch {
	case v.CanInt():
		i := v.Int()
		if i < 0 {
			return num{neg: true, abs: uint64(-(i + 1)) + 1}, true
		}
		return num{abs: uint64(i)}, true
	case v.CanUint():
		return num{abs: v.Uint()}, true
	case v.CanFloat():
		f := v.Float()
		if f == math.Trunc(f) && math.Abs(f) < 1<<63 {
			if f < 0 {
				return num{neg: true, abs: uint64(-f)}, true
			}
			return num{abs: uint64(f)}, true
		}
		return num{float: f, isF: true}, true
	}
	return num{}, false
}

func isNumberKind(k reflect.Kind) bool {
	return (k >= reflect.Int && k <= reflect.Uint64) || k == reflect.Float32 || k == reflect.Float64
}

// EqualValues requires the values to be equal once converted to one type (1 and int64(1) are).
func EqualValues(t TB, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	if !equalValues(expected, actual) {
		fail(t, fmt.Sprintf("not equal:\n\texpected: %s\n\tactual:   %s", show(expected), show(actual)), msgAndArgs)
	}
}

// ElementsMatch requires the two lists to hold the same elements, each as often, in any order.
func ElementsMatch(t TB, listA, listB any, msgAndArgs ...any) {
	t.Helper()
	a, b := reflect.ValueOf(listA), reflect.ValueOf(listB)
	used := make([]bool, b.Len())
	ok := a.Len() == b.Len()
	for i := 0; ok && i < a.Len(); i++ {
		found := false
		for j := range used {
			if !used[j] && equal(a.Index(i).Interface(), b.Index(j).Interface()) {
				used[j], found = true, true
				break
			}
		}
		ok = found
	}
	if !ok {
		fail(t, fmt.Sprintf("elements differ:\n\tA: %s\n\tB: %s", show(listA), show(listB)), msgAndArgs)
	}
}

// Same requires two pointers to point at the same value.
func Same(t TB, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	ev, av := reflect.ValueOf(expected), reflect.ValueOf(actual)
	if ev.Kind() != reflect.Pointer || av.Kind() != reflect.Pointer || ev.Type() != av.Type() || ev.Pointer() != av.Pointer() {
		fail(t, fmt.Sprintf("not the same pointer: %p and %p", expected, actual), msgAndArgs)
	}
}

// isNil reports whether v is nil or a nil pointer, map, slice, channel, function or interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Chan, reflect.Func, reflect.Interface, reflect.Map, reflect.Pointer, reflect.Slice, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

// Nil requires v to be nil.
func Nil(t TB, v any, msgAndArgs ...any) {
	t.Helper()
	if !isNil(v) {
		fail(t, fmt.Sprintf("expected nil, got %s", show(v)), msgAndArgs)
	}
}

// NotNil requires v not to be nil.
func NotNil(t TB, v any, msgAndArgs ...any) {
	t.Helper()
	if isNil(v) {
		fail(t, "expected a value, got nil", msgAndArgs)
	}
}

// True requires ok.
func True(t TB, ok bool, msgAndArgs ...any) {
	t.Helper()
	if !ok {
		fail(t, "should be true", msgAndArgs)
	}
}

// False requires !ok.
func False(t TB, ok bool, msgAndArgs ...any) {
	t.Helper()
	if ok {
		fail(t, "should be false", msgAndArgs)
	}
}

// isZero reports whether v is nil or its type's zero value.
func isZero(v any) bool {
	return v == nil || reflect.ValueOf(v).IsZero()
}

// Zero requires v to be its type's zero value.
func Zero(t TB, v any, msgAndArgs ...any) {
	t.Helper()
	if !isZero(v) {
		fail(t, fmt.Sprintf("should be zero, is %s", show(v)), msgAndArgs)
	}
}

// NotZero requires v not to be its type's zero value.
func NotZero(t TB, v any, msgAndArgs ...any) {
	t.Helper()
	if isZero(v) {
		fail(t, fmt.Sprintf("should not be zero, is %s", show(v)), msgAndArgs)
	}
}

// isEmpty reports whether v is nil, a zero value, an empty slice, map, channel or string, or a pointer to an
// empty value.
func isEmpty(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Chan, reflect.Map, reflect.Slice:
		return rv.Len() == 0
	case reflect.Pointer:
		return rv.IsNil() || isEmpty(rv.Elem().Interface())
	}
	return rv.IsZero()
}

// Empty requires v to be empty: nil, zero, or of length 0.
func Empty(t TB, v any, msgAndArgs ...any) {
	t.Helper()
	if !isEmpty(v) {
		fail(t, fmt.Sprintf("should be empty, is %s", show(v)), msgAndArgs)
	}
}

// NotEmpty requires v not to be empty.
func NotEmpty(t TB, v any, msgAndArgs ...any) {
	t.Helper()
	if isEmpty(v) {
		fail(t, fmt.Sprintf("should not be empty, is %s", show(v)), msgAndArgs)
	}
}

// Len requires a slice, array, map, channel or string of length n.
func Len(t TB, v any, n int, msgAndArgs ...any) {
	t.Helper()
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array, reflect.Map, reflect.Chan, reflect.String:
		if rv.Len() != n {
			fail(t, fmt.Sprintf("has %d elements, not %d: %s", rv.Len(), n, show(v)), msgAndArgs)
		}
	default:
		fail(t, fmt.Sprintf("%T has no length", v), msgAndArgs)
	}
}

// contains reports whether a string holds a substring, a map a key, or a slice or array an element.
func contains(container, elem any) (found, ok bool) {
	cv := reflect.ValueOf(container)
	switch cv.Kind() {
	case reflect.String:
		ev := reflect.ValueOf(elem)
		if ev.Kind() != reflect.String {
			return false, false
		}
		return strings.Contains(cv.String(), ev.String()), true
	case reflect.Map:
		for _, k := range cv.MapKeys() {
			if equal(k.Interface(), elem) {
				return true, true
			}
		}
		return false, true
	case reflect.Slice, reflect.Array:
		for i := 0; i < cv.Len(); i++ {
			if equal(cv.Index(i).Interface(), elem) {
				return true, true
			}
		}
		return false, true
	}
	return false, false
}

// Contains requires container (a string, slice, array or map's keys) to hold elem.
func Contains(t TB, container, elem any, msgAndArgs ...any) {
	t.Helper()
	found, ok := contains(container, elem)
	if !ok {
		fail(t, fmt.Sprintf("%T cannot hold %T", container, elem), msgAndArgs)
	} else if !found {
		fail(t, fmt.Sprintf("%s does not contain %s", show(container), show(elem)), msgAndArgs)
	}
}

// NotContains requires container not to hold elem.
func NotContains(t TB, container, elem any, msgAndArgs ...any) {
	t.Helper()
	found, ok := contains(container, elem)
	if !ok {
		fail(t, fmt.Sprintf("%T cannot hold %T", container, elem), msgAndArgs)
	} else if found {
		fail(t, fmt.Sprintf("%s contains %s", show(container), show(elem)), msgAndArgs)
	}
}

// Subset requires every element of subset (a slice, or a map's keys) to be in list.
func Subset(t TB, list, subset any, msgAndArgs ...any) {
	t.Helper()
	sv := reflect.ValueOf(subset)
	var elems []any
	switch sv.Kind() {
	case reflect.Map:
		for _, k := range sv.MapKeys() {
			elems = append(elems, k.Interface())
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < sv.Len(); i++ {
			elems = append(elems, sv.Index(i).Interface())
		}
	default:
		fail(t, fmt.Sprintf("%T is not a list", subset), msgAndArgs)
		return
	}
	for _, e := range elems {
		if found, ok := contains(list, e); !ok || !found {
			fail(t, fmt.Sprintf("%s does not contain %s", show(list), show(e)), msgAndArgs)
			return
		}
	}
}

// Regexp requires s to match the regular expression rx (a string or a *regexp.Regexp).
func Regexp(t TB, rx any, s string, msgAndArgs ...any) {
	t.Helper()
	if !compile(rx).MatchString(s) {
		fail(t, fmt.Sprintf("%q does not match %v", s, rx), msgAndArgs)
	}
}

// NotRegexp requires s not to match the regular expression rx.
func NotRegexp(t TB, rx any, s string, msgAndArgs ...any) {
	t.Helper()
	if compile(rx).MatchString(s) {
		fail(t, fmt.Sprintf("%q matches %v", s, rx), msgAndArgs)
	}
}

func compile(rx any) *regexp.Regexp {
	if r, ok := rx.(*regexp.Regexp); ok {
		return r
	}
	return regexp.MustCompile(fmt.Sprint(rx))
}

// Greater requires a > b.
func Greater[T cmp.Ordered](t TB, a, b T, msgAndArgs ...any) {
	t.Helper()
	if !(a > b) {
		fail(t, fmt.Sprintf("%v is not greater than %v", a, b), msgAndArgs)
	}
}

// GreaterOrEqual requires a >= b.
func GreaterOrEqual[T cmp.Ordered](t TB, a, b T, msgAndArgs ...any) {
	t.Helper()
	if !(a >= b) {
		fail(t, fmt.Sprintf("%v is less than %v", a, b), msgAndArgs)
	}
}

// Less requires a < b.
func Less[T cmp.Ordered](t TB, a, b T, msgAndArgs ...any) {
	t.Helper()
	if !(a < b) {
		fail(t, fmt.Sprintf("%v is not less than %v", a, b), msgAndArgs)
	}
}

// LessOrEqual requires a <= b.
func LessOrEqual[T cmp.Ordered](t TB, a, b T, msgAndArgs ...any) {
	t.Helper()
	if !(a <= b) {
		fail(t, fmt.Sprintf("%v is greater than %v", a, b), msgAndArgs)
	}
}

// Positive requires v > 0.
func Positive[T cmp.Ordered](t TB, v T, msgAndArgs ...any) {
	t.Helper()
	var zero T
	if !(v > zero) {
		fail(t, fmt.Sprintf("%v is not positive", v), msgAndArgs)
	}
}

// InDelta requires |expected - actual| <= delta.
func InDelta(t TB, expected, actual, delta float64, msgAndArgs ...any) {
	t.Helper()
	if math.IsNaN(actual) || math.Abs(expected-actual) > delta {
		fail(t, fmt.Sprintf("%v and %v differ by more than %v", expected, actual, delta), msgAndArgs)
	}
}

// WithinDuration requires the two times to be at most delta apart.
func WithinDuration(t TB, expected, actual time.Time, delta time.Duration, msgAndArgs ...any) {
	t.Helper()
	if d := expected.Sub(actual); d < -delta || d > delta {
		fail(t, fmt.Sprintf("%v and %v are %v apart, more than %v", expected, actual, d, delta), msgAndArgs)
	}
}

// panicked runs f and returns what it panicked with.
func panicked(f func()) (didPanic bool, value any) {
	didPanic = true
	defer func() { value = recover() }()
	f()
	didPanic = false
	return
}

// Panics requires f to panic.
func Panics(t TB, f func(), msgAndArgs ...any) {
	t.Helper()
	if did, _ := panicked(f); !did {
		fail(t, "the function did not panic", msgAndArgs)
	}
}

// PanicsWithValue requires f to panic with value.
func PanicsWithValue(t TB, value any, f func(), msgAndArgs ...any) {
	t.Helper()
	did, got := panicked(f)
	if !did {
		fail(t, "the function did not panic", msgAndArgs)
	} else if !equal(value, got) {
		fail(t, fmt.Sprintf("panicked with %s, not %s", show(got), show(value)), msgAndArgs)
	}
}

// NotPanics requires f not to panic.
func NotPanics(t TB, f func(), msgAndArgs ...any) {
	t.Helper()
	if did, v := panicked(f); did {
		fail(t, fmt.Sprintf("the function panicked with %s", show(v)), msgAndArgs)
	}
}

// Eventually requires condition to return true within waitFor, asking every tick.
func Eventually(t TB, condition func() bool, waitFor, tick time.Duration, msgAndArgs ...any) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for {
		if condition() {
			return
		}
		if time.Now().After(deadline) {
			fail(t, fmt.Sprintf("the condition did not hold within %v", waitFor), msgAndArgs)
			return
		}
		<-ticker.C
	}
}
