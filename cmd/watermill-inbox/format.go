package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// days is a duration flag that also takes days ("14d", "1d12h"), and prints whole days as such.
type days time.Duration

func (d *days) Set(s string) error {
	var total time.Duration
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 {
			return fmt.Errorf("bad number of days in %q", s)
		}
		total, s = time.Duration(n)*24*time.Hour, s[i+1:]
	}
	if s != "" {
		rest, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		total += rest
	}
	*d = days(total)
	return nil
}

func (d days) String() string {
	t := time.Duration(d)
	if t >= 24*time.Hour {
		day := t / (24 * time.Hour)
		rest := (t - day*24*time.Hour).Round(time.Minute)
		if rest == 0 {
			return fmt.Sprintf("%dd", day)
		}
		return fmt.Sprintf("%dd%s", day, strings.TrimSuffix(rest.String(), "0s"))
	}
	return t.Round(time.Second).String()
}

// group formats n with thousands separators.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// count formats n with its noun, singular for exactly one.
func count(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return group(n) + " " + many
}

// bytesOf formats a size in binary units, as PostgreSQL's pg_size_pretty does.
func bytesOf(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	f, u := float64(n), 0
	units := []string{"kB", "MB", "GB", "TB"}
	for f /= unit; f >= unit && u < len(units)-1; f /= unit {
		u++
	}
	return fmt.Sprintf("%.1f %s", f, units[u])
}
