package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// The short form of `harness scale`, as CI runs it: every variant at 10,000 and 100,000 retained rows. Every
// record is written with its sizes' rows, each cleanup removed exactly the expired rows and left none, every window
// measured claims, the plot has a line per variant and window, and --replot writes the same report again from the
// records, keeping the prose outside the markers.
func TestScale_ShortFormRecordsEveryVariantAndSizeAndReplotWritesTheSameReport(t *testing.T) {
	db := storageTestDB(t)
	logTo(t)
	out := t.TempDir()
	c, err := parseScale([]string{"--short", "--dsn", testDSN(), "--out", out}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	measured, err := runScale(ctx, c, testProgress{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("short form in %s", time.Since(start).Round(time.Second))
	recs, err := readScaleRecords(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(scaleVariants) * len(scaleShortSizes); len(measured) != want || len(recs) != want {
		t.Fatalf("%d records measured and %d in %s, want %d", len(measured), len(recs), out, want)
	}
	byName := map[string]scaleRecord{}
	for _, r := range recs {
		byName[scaleRecordFile(r.Variant, r.Rows)] = r
	}
	for _, v := range scaleVariants {
		for _, n := range scaleShortSizes {
			name := scaleRecordFile(v.Name, n)
			r, ok := byName[name]
			if !ok {
				t.Errorf("no record %s", name)
				continue
			}
			e := scaleExpired(n, c.ExpiredShare)
			if r.Rows != n || r.Expired != e || r.Loaded != int64(n+e) {
				t.Errorf("%s: %d rows and %d expired, %d loaded; want %d, %d and %d", name, r.Rows, r.Expired, r.Loaded, n, e, n+e)
			}
			if r.Removal.Rows != int64(e) || r.Removal.ExpiredLeft != 0 {
				t.Errorf("%s: the cleanup removed %d rows of %d and left %d expired", name, r.Removal.Rows, e, r.Removal.ExpiredLeft)
			}
			if v.Partitioned && r.Removal.PartitionsDropped == 0 {
				t.Errorf("%s: the cleanup dropped no partition", name)
			}
			if r.Size.TotalPerRow <= 0 || r.Size.DiskBytes <= 0 || r.Size.PKeyLevel < 1 {
				t.Errorf("%s: size %+v", name, r.Size)
			}
			for _, w := range []scaleWindow{r.Idle, r.Cleanup} {
				if w.Claims <= 0 || w.P50Ms <= 0 || w.P99Ms < w.P50Ms || w.P999Ms < w.P99Ms || w.PerSec <= 0 {
					t.Errorf("%s, %s: %d claims, p50 %.2f p99 %.2f p99.9 %.2f ms, %.0f/s", name, w.Window, w.Claims, w.P50Ms, w.P99Ms, w.P999Ms, w.PerSec)
				}
				if w.CacheHit <= 0 || w.CacheHit > 1 || w.BlocksHit+w.BlocksRead == 0 {
					t.Errorf("%s, %s: cache hit %v of %d blocks: the claims' buffer counters were not read", name, w.Window, w.CacheHit, w.BlocksHit+w.BlocksRead)
				}
			}
			if r.Cleanup.Seconds < c.Measure.Seconds() {
				t.Errorf("%s: claims during the cleanup measured for %.2f s, less than --measure", name, r.Cleanup.Seconds)
			}
		}
	}

	svg, err := os.ReadFile(filepath.Join(out, scalePlotFile))
	if err != nil {
		t.Fatal(err)
	}
	checkScalePlot(t, svg)

	// The prose is the reader's: a line added above the markers stays, and a generated part gone stale is written
	// again as it was.
	readmePath := filepath.Join(out, scaleReadme)
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, []byte(scaleBeginMark)) || !bytes.Contains(readme, []byte("| uuid7-partitioned | 100,000 | 1,000 |")) {
		t.Fatalf("README.md lacks its generated table:\n%s", readme)
	}
	edited := "Hand-written, above the markers.\n\n" + string(readme)
	begin, end := strings.Index(edited, scaleBeginMark), strings.Index(edited, scaleEndMark)
	stale := edited[:begin] + scaleBeginMark + "\nstale\n" + edited[end:]
	if err := os.WriteFile(readmePath, []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(out, scalePlotFile)); err != nil {
		t.Fatal(err)
	}
	rc, err := parseScale([]string{"--replot", "--out", out}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runScale(ctx, rc, testProgress{}); err != nil {
		t.Fatal(err)
	}
	again, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != edited {
		t.Errorf("--replot wrote another README.md:\n%s\nwant:\n%s", again, edited)
	}
	svgAgain, err := os.ReadFile(filepath.Join(out, scalePlotFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(svgAgain, svg) {
		t.Error("--replot drew another plot")
	}

	expectNoRelationsLeft(t, db, "scale")
}

// checkScalePlot checks that svg is an SVG document with a legend entry and two strokes of its style (the line and
// the legend's sample) for each variant idle and during the cleanup, the same colour, dashed during the cleanup.
func checkScalePlot(t *testing.T, svg []byte) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	root := ""
	styles := map[string]int{}
	var texts []string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the plot is not well-formed XML: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = el.Name.Local
			}
			for _, a := range el.Attr {
				// The data lines and their legend samples are the only strokes 2 wide.
				if el.Name.Local == "path" && a.Name.Local == "style" &&
					(strings.HasSuffix(a.Value, ";stroke-width:2") || strings.Contains(a.Value, ";stroke-width:2;")) {
					styles[a.Value]++
				}
			}
		case xml.CharData:
			if s := strings.TrimSpace(string(el)); s != "" {
				texts = append(texts, s)
			}
		}
	}
	if root != "svg" {
		t.Fatalf("the plot's root element is <%s>, want <svg>", root)
	}
	want := map[string]int{}
	for _, v := range scaleVariants {
		stroke := "stroke:" + strings.ToUpper(v.Color)
		want["fill:none;"+stroke+";stroke-width:2"] = 2
		want["fill:none;"+stroke+";stroke-width:2;stroke-dasharray:6,3"] = 2
		for _, name := range []string{v.Name + " idle", v.Name + " during cleanup"} {
			if !slices.Contains(texts, name) {
				t.Errorf("the plot's legend lacks %q", name)
			}
		}
	}
	if fmt.Sprint(styles) != fmt.Sprint(want) {
		t.Errorf("the plot's lines, by style: %v, want %v", styles, want)
	}
}

// The loaded IDs ascend, so that the primary key fills by appending: UUIDv7 ones carry their row's millisecond
// and stay in order within one; text ones are UUID-shaped and spread evenly over the key space.
func TestScaleIDs_AscendAndSpreadOverTheKeySpace(t *testing.T) {
	t.Parallel()
	shape := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	const n = 16_000
	text := newScaleIDs(true, n, 1)
	firstDigit := map[byte]int{}
	prev := ""
	for i := range n {
		id := text.next(i, 0)
		if !shape.MatchString(id) || id <= prev {
			t.Fatalf("text ID %d: %q after %q", i, id, prev)
		}
		firstDigit[id[0]]++
		prev = id
	}
	for d, k := range firstDigit {
		if k != n/16 {
			t.Errorf("%d text IDs begin with %c, want %d: not spread evenly", k, d, n/16)
		}
	}
	v7 := newScaleIDs(false, n, 1)
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli()
	prev = ""
	for i := range n {
		ms := base + int64(i/1000) // a thousand IDs in each millisecond
		id := v7.next(i, ms)
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 || id <= prev {
			t.Fatalf("v7 ID %d: %q after %q (%v)", i, id, prev, err)
		}
		if got := time.Unix(u.Time().UnixTime()).UnixMilli(); got != ms {
			t.Fatalf("v7 ID %d carries %d ms, want %d", i, got, ms)
		}
		prev = id
	}
}

func TestParseScale_ShortSetsTheShortFormWhereNoFlagSaysOtherwise(t *testing.T) {
	t.Parallel()
	long, err := parseScale(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(long.Sizes) != "[100000 1000000 10000000 100000000]" || len(long.Variants) != 3 || long.Measure != 20*time.Second ||
		long.Claimers != 4 || long.Consumers != 4 || long.ExpiredShare != 0.01 || long.Out != "../docs/results/scale" {
		t.Errorf("long form: %+v", long)
	}
	short, err := parseScale([]string{"--short", "--variants", "text", "--measure", "2s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(short.Sizes) != "[10000 100000]" || len(short.Variants) != 1 || short.Measure != 2*time.Second || short.Out != "" {
		t.Errorf("--short --variants text --measure 2s: %+v", short)
	}
	for _, args := range [][]string{{"--variants", "uuid4"}, {"--sizes", "1"}, {"--expired-share", "0"}, {"--consumers", "0"},
		{"--expired-span", "1m"}, {"--replot", "--out", ""}, {"extra"}} {
		if _, err := parseScale(args, io.Discard); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	if _, err := parseScale([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	if got := []int{scaleExpired(10_000, 0.01), scaleExpired(1_000_000, 0.01), scaleExpired(1e9, 0.01)}; fmt.Sprint(got) != "[1000 10000 1000000]" {
		t.Errorf("expired rows for 10^4, 10^6 and 10^9 rows: %v", got)
	}
}
