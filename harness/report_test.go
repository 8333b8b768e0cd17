package main

import (
	"encoding/xml"
	"io"
	"math"
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
	c := barChart{Title: "T & <t>", Categories: []string{"a", "b"}, Series: []series{
		{Name: "x", Color: "#000", Values: []float64{10, math.NaN()}, Lo: []float64{8, 0}, Hi: []float64{12, 0}},
		{Name: "y", Color: "#111", Values: []float64{0, 3}, Hollow: true},
	}}
	svg := c.svg()
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
	for _, want := range []string{"n/a", ">3<", "T &amp; &lt;t&gt;"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
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
		Bands: [][2]float64{{1.2, 2.5}}, Marks: []float64{0.5, 2.8}}
	svg := tl.svg()
	if strings.Contains(svg, "NaN") || !strings.Contains(svg, "<polyline") || strings.Count(svg, `fill-opacity="0.18"`) != 2 {
		t.Fatalf("timeline lacks its line or its outage band, or has a NaN:\n%s", svg)
	}
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("timeline is not well-formed XML: %v", err)
		}
	}
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
	if strings.Contains(svg, "NaN") || strings.Count(svg, "<svg ") != 3 {
		t.Errorf("want one chart per transport and sleep in one SVG, without NaN:\n%s", svg)
	}
}
