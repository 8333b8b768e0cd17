package text

import (
	"strings"
	"testing"
)

func TestProblemNamesWhatATextColumnCannotHold(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"wallet-credits", 64, ""},
		{"", 64, "empty"},
		{strings.Repeat("a", 9), 8, "9 bytes, over the limit of 8"},
		{"a\xffb", 64, "not valid UTF-8"},
		{"ab\x00c", 64, "contains a NUL byte at offset 2"},
	} {
		if got := Problem(c.in, c.max); got != c.want {
			t.Errorf("Problem(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestQuoteCutsLongTextsTo64Bytes(t *testing.T) {
	if got := Quote("a\"b"); got != `"a\"b"` {
		t.Errorf("Quote of a short text = %s", got)
	}
	if got := Quote(strings.Repeat("x", 100)); got != `"`+strings.Repeat("x", 64)+`"...` {
		t.Errorf("Quote of a long text = %s", got)
	}
}
