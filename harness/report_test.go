package main

import (
	"encoding/xml"
	"io"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestSpreadOf_TakesTheMiddleOrTheMeanOfTheTwoMiddles(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want spread
	}{
		{[]float64{5, 1, 3}, spread{3, 1, 5}},
		{[]float64{4, 1, 3, 2}, spread{2.5, 1, 4}},
		{[]float64{7}, spread{7, 7, 7}},
	} {
		if got := spreadOf(c.in); got != c.want {
			t.Errorf("spreadOf(%v) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

func TestThousands_FormatsLikeTheArticle(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999: "999", 3648: "3,648", 40000: "40,000", 1234567: "1,234,567", 2.5: "2.5", -1500: "-1,500"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%v) = %q, want %q", in, got, want)
		}
	}
}

// An SVG that does not parse shows as a broken image on the results page, and a NaN in a coordinate makes the
// whole chart blank in most renderers.
func TestBarChart_IsValidSVGAndSkipsBarsThatWereNotMeasured(t *testing.T) {
	c := barChart{Title: "T & <t>", Subtitle: "sub", YLabel: "per run", Categories: []string{"cat-a", "cat-b"}, Series: []series{
		{Name: "ours", Color: "#a00", Values: []float64{10, math.NaN()}, Lo: []float64{8, 0}, Hi: []float64{12, 0}},
		{Name: "theirs", Color: "#0a0", Values: []float64{0, 3}, Hollow: true},
	}}
	svg := c.svg()
	wellFormedSVG(t, svg)
	// Every label is a <text> element: the title escaped, the categories, the series in the legend, and a value
	// on every bar, "n/a" on the one that was not measured.
	for _, want := range []string{">T &amp; &lt;t&gt;</text>", ">sub</text>", ">per run</text>", ">cat-a</text>", ">cat-b</text>",
		">ours</text>", ">theirs</text>", ">10</text>", ">n/a</text>", ">0</text>", ">3</text>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	if n := strings.Count(svg, "font-size:8px"); n != 4 {
		t.Errorf("%d value labels, want one per bar (4)", n)
	}
	// The measured bar and its legend swatch are filled; the NaN bar is not drawn. The hollow series is an
	// outline: its two bars and its swatch.
	if n := strings.Count(svg, "fill:#AA0000"); n != 2 {
		t.Errorf("%d filled shapes of the first series, want 2 (one bar, one swatch)", n)
	}
	if n := strings.Count(svg, "stroke:#00AA00;stroke-width:1.5"); n != 3 {
		t.Errorf("%d outlines of the hollow series, want 3 (two bars, one swatch)", n)
	}
	// The whisker is a stroke and two caps in the axis colour, beside the value axis itself.
	if n := strings.Count(svg, `style="fill:none;stroke:#444444" />`); n != 3 {
		t.Errorf("%d whisker strokes, want 3 (one whisker and its caps)", n)
	}
}

func TestBarChart_LogAxisKeepsZeroAndMarksPowersOfTen(t *testing.T) {
	c := barChart{Title: "t", Log: true, Categories: []string{"a"}, Series: []series{
		{Name: "x", Color: "#a00", Values: []float64{0}}, {Name: "y", Color: "#0a0", Values: []float64{3648}},
	}}
	svg := c.svg()
	wellFormedSVG(t, svg)
	for _, want := range []string{">0</text>", ">1</text>", ">10</text>", ">100</text>", ">1,000</text>", ">10,000</text>", ">3,648</text>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("log chart lacks %q", want)
		}
	}
	if strings.Contains(svg, ">100,000</text>") {
		t.Error("log axis runs past the next power of ten")
	}
}

// wellFormedSVG fails t if svg has a NaN or does not parse as XML.
func wellFormedSVG(t *testing.T, svg string) {
	t.Helper()
	if strings.Contains(svg, "NaN") {
		t.Fatalf("chart has a NaN coordinate:\n%s", svg)
	}
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v", err)
		}
	}
}

func TestKillReport_PutsTheArticlesFiguresBesideOurs(t *testing.T) {
	c := killConfig{Variants: []variant{afterDB, inboxVariant}, Runs: 2, Kills: 20, Events: 100, MinWork: time.Second, MaxWork: 8 * time.Second}
	res := []killResult{
		{Variant: afterDB, Kills: 20, Duplicates: 100}, {Variant: afterDB, Kills: 19, Duplicates: 300},
		{Variant: inboxVariant, Kills: 20, Skipped: 50}, {Variant: inboxVariant, Kills: 20, Skipped: 70},
	}
	table, _ := killReport(c, res)
	for _, want := range []string{"| `after-db` | 19.5 (19–20) | 200 (100–300) |", "3,648 (2,777–4,525)", "| `inbox` | 20 (20–20) | 0 (0–0) | 0 (0–0) | 60 (50–70) |"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

func TestKillSchedule_IsTheSameForEveryVariantAndStaysInRange(t *testing.T) {
	c := killConfig{Runs: 3, Kills: 20, MinWork: time.Second, MaxWork: 8 * time.Second, Seed: 42}
	a, b := killSchedule(c), killSchedule(c)
	for r := range a {
		for k := range a[r] {
			if a[r][k] != b[r][k] {
				t.Fatalf("run %d kill %d: %s then %s from one seed", r, k, a[r][k], b[r][k])
			}
			if a[r][k] < c.MinWork || a[r][k] > c.MaxWork {
				t.Fatalf("run %d kill %d: %s outside %s–%s", r, k, a[r][k], c.MinWork, c.MaxWork)
			}
		}
	}
	if a[0][0] == a[1][0] && a[0][1] == a[1][1] {
		t.Fatal("runs 1 and 2 share their delays: five runs would measure one schedule five times")
	}
}

func TestTimeline_IsValidSVGWithTheFaultsOnIt(t *testing.T) {
	tl := timeline{Title: "t", Points: []progressSample{{0, 0}, {1, 400}, {2, 400}, {3, 900}},
		Bands: [][2]float64{{1.2, 2.5}, {2.6, 2.9}}, Marks: []float64{0.5, 2.8}}
	svg := tl.svg()
	wellFormedSVG(t, svg)
	// The line is one path through the four points, beside its legend swatch; each outage is a translucent
	// polygon, beside the legend's; each mark is a stroke, beside the legend's.
	if n := strings.Count(svg, "stroke:#27AE60;stroke-width:2"); n != 2 {
		t.Errorf("%d progress lines, want 2 (the line and its swatch)", n)
	}
	if !regexp.MustCompile(`<path d="M[^"L]+(L[^"L]+){3}" style="fill:none;stroke:#27AE60`).MatchString(svg) {
		t.Error("no path through the four progress points")
	}
	if n := strings.Count(svg, "fill-opacity:0.18"); n != 3 {
		t.Errorf("%d translucent bands, want 3 (two outages and the swatch)", n)
	}
	if n := strings.Count(svg, "stroke:#7F8C8D;stroke-width:1.5"); n != 3 {
		t.Errorf("%d termination marks, want 3 (two marks and the swatch)", n)
	}
	for _, want := range []string{">events credited</text>", ">PostgreSQL restarting</text>", ">seconds since the consumer started working</text>", ">800</text>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("timeline lacks %q", want)
		}
	}
	// A report with no runs still draws an empty chart.
	wellFormedSVG(t, timeline{}.svg())
}

func TestThroughputReport_GivesTheCeilingToEveryTransportAndRatiosOfMedians(t *testing.T) {
	c := throughputConfig{Transports: []transportKind{kafkaTransport, amqpTransport}, Variants: []variant{afterDB, inboxVariant, batchVariant},
		InFlight: []int{1, 8}, Sleeps: []time.Duration{0}, Runs: 3, PerSlot: 10, Messages: 100, Ceiling: true, Accounts: 100, Batch: defaultBatch}
	var res []throughputResult
	add := func(kind transportKind, name string, inFlight int, rates ...float64) {
		for r, rate := range rates {
			res = append(res, throughputResult{Transport: kind, Name: name, InFlight: inFlight, Round: r, Messages: 80, MsgPerS: rate, Commits: 20})
		}
	}
	add("", ceilingName, 8, 1000, 1200, 1100)
	add(kafkaTransport, string(afterDB), 8, 900, 800, 1000)
	add(kafkaTransport, string(inboxVariant), 8, 450, 400, 500)
	add(kafkaTransport, string(batchVariant), 8, 700, 750, 600)
	res = append(res, throughputResult{Transport: kafkaTransport, Name: string(batchVariant), InFlight: 8, Round: 3, Messages: 80,
		MsgPerS: 650, Nacks: 2, Deadlocks: 1, Commits: 20})
	table, svg := throughputReport(c, res)
	for _, want := range []string{
		"**kafka, zero-work handlers**", "**amqp, zero-work handlers**",
		// ceiling, after-db, inbox, batch; inbox ÷ after-db, batch ÷ inbox, inbox ÷ ceiling, batch ÷ ceiling; 4 messages per commit
		"| 8 | 1100 (1000–1200) | 900 (800–1000) | 450 (400–500) | 675 (600–750) | 0.50 | 1.50 | 0.41 | 0.61 | batch 4.0 | batch 2 (1) |",
		// Nothing at 1 in flight; the ceiling at 8 stands beside amqp's consumers too.
		"| 1 | – | – | – | – | – | – | – | – | – | 0 |",
		"| 8 | 1100 (1000–1200) | – | – | – |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	wellFormedSVG(t, svg)
	if strings.Count(svg, "<svg ") != 1 || strings.Count(svg, ">median msg/s of 3 rounds; whiskers: min–max</text>") != 2 {
		t.Errorf("want one chart per transport and sleep in one SVG:\n%s", svg)
	}
	for _, want := range []string{">kafka, zero-work handlers</text>", ">amqp, zero-work handlers</text>", ">1 in flight</text>", ">8 in flight</text>",
		">ceiling</text>", ">after-db</text>", ">inbox</text>", ">batch</text>", ">1,100</text>", ">675</text>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("charts lack %q", want)
		}
	}
}
