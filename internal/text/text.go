// Package text checks the names and IDs the inbox stores in text columns, and quotes them for error messages.
package text

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Problem says why s cannot be stored faithfully in a text column of at most max bytes, or returns "".
// PostgreSQL's text type refuses NUL bytes and invalid UTF-8; an empty name or ID identifies nothing.
func Problem(s string, max int) string {
	switch {
	case s == "":
		return "empty"
	case len(s) > max:
		return fmt.Sprintf("%d bytes, over the limit of %d", len(s), max)
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	}
	if at := strings.IndexByte(s, 0); at >= 0 {
		return fmt.Sprintf("contains a NUL byte at offset %d", at)
	}
	return ""
}

// Quote quotes s for an error message, cut to its first 64 bytes: a name over the limit may be kilobytes long.
func Quote(s string) string {
	if len(s) <= 64 {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:64]) + "..."
}
