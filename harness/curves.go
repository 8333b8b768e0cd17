package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/perf/benchfmt"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// `harness curves` draws what pgxinbox's BenchmarkRouterWithoutInbox measured, from its output as `go test -bench`
// printed it: throughput and the client's CPU time per message against messages in flight, a line per mode, and a
// table of the medians with the ratios that batch mode is held to. It measures nothing itself: the record is the
// benchmark's output, kept beside the plot, and the command redraws the plot from it.

// curvesRecord is the benchmark output that the docs' plot is drawn from.
const curvesRecord = "../docs/results/curves/router-without-inbox.txt"

// curveMode is one mode of the benchmark as the plot draws it.
type curveMode struct {
	Key, Name string
	Color     string
	Dashed    bool // over database/sql and lib/pq
}

// curveModes are the benchmark's modes in the order of the legend and the table.
var curveModes = []curveMode{
	{Key: "none", Name: "router alone, no database", Color: "#2c3e50"},
	{Key: "autocommit", Name: "autocommit, no inbox (pgx)", Color: colorNeutral},
	{Key: "message", Name: "inbox per message (pgx)", Color: "#2980b9"},
	{Key: "batch", Name: "inbox batch (pgx)", Color: colorInbox},
	{Key: "batch-concurrency2", Name: "batch, WithBatchConcurrency(2) (pgx)", Color: "#27ae60"},
	{Key: "message-plainbegin", Name: "per message, PlainBegin (pgx)", Color: "#8e44ad"},
	{Key: "batch-plainbegin", Name: "batch, PlainBegin (pgx)", Color: "#d35400"},
	{Key: "autocommit-libpq", Name: "autocommit, no inbox (lib/pq)", Color: colorNeutral, Dashed: true},
	{Key: "message-libpq", Name: "inbox per message (lib/pq)", Color: "#2980b9", Dashed: true},
	{Key: "batch-libpq", Name: "inbox batch (lib/pq)", Color: colorInbox, Dashed: true},
}

// curveKey is one cell of the benchmark: a mode at a count of messages in flight.
type curveKey struct {
	Mode     string
	InFlight int
}

// curveData is the benchmark output read: the runs of each cell, and BenchmarkBatchFloor's CPU per message by
// batch size.
type curveData struct {
	Rate, CPU map[curveKey][]float64
	Floor     map[int][]float64
}

func runCurves(args []string) error {
	fs := flag.NewFlagSet("curves", flag.ContinueOnError)
	in := fs.String("bench", curvesRecord, "the output of pgxinbox's `go test -bench 'RouterWithoutInbox|BatchFloor'` to draw")
	out := fs.String("out", "", "where to write curves.svg and the table (README.md's generated part); the record's directory by default")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		*out = filepath.Dir(*in)
	}
	f, err := os.Open(*in)
	if err != nil {
		return err
	}
	defer f.Close()
	d, err := readCurves(f, *in)
	if err != nil {
		return err
	}
	table := curvesTable(d)
	fmt.Print(table)
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "curves.svg"), []byte(curvesPlot(d)), 0o644); err != nil {
		return err
	}
	return replaceGenerated(filepath.Join(*out, "README.md"), "curves", table)
}

// readCurves reads benchmark output: the runs of BenchmarkRouterWithoutInbox's cells (msgs/s and cpu-µs/msg) and
// BenchmarkBatchFloor's cpu-µs/msg. Lines of other benchmarks are passed over.
func readCurves(r io.Reader, name string) (curveData, error) {
	d := curveData{Rate: map[curveKey][]float64{}, CPU: map[curveKey][]float64{}, Floor: map[int][]float64{}}
	br := benchfmt.NewReader(r, name)
	for br.Scan() {
		res, ok := br.Result().(*benchfmt.Result)
		if !ok {
			continue
		}
		base, parts := res.Name.Parts()
		conf := map[string]string{}
		for _, p := range parts {
			if k, v, ok := strings.Cut(strings.TrimPrefix(string(p), "/"), "="); ok {
				conf[k] = v
			}
		}
		cpu, hasCPU := benchValue(res, "cpu-µs/msg")
		switch string(base) {
		case "RouterWithoutInbox":
			n, err := strconv.Atoi(conf["inflight"])
			if err != nil || conf["mode"] == "" {
				return d, fmt.Errorf("%s: a result named %s has no inflight and mode", name, res.Name.Full())
			}
			k := curveKey{conf["mode"], n}
			if rate, ok := benchValue(res, "msgs/s"); ok {
				d.Rate[k] = append(d.Rate[k], rate)
			}
			if hasCPU {
				d.CPU[k] = append(d.CPU[k], cpu)
			}
		case "BatchFloor":
			if n, err := strconv.Atoi(conf["size"]); err == nil && hasCPU {
				d.Floor[n] = append(d.Floor[n], cpu)
			}
		}
	}
	if err := br.Err(); err != nil {
		return d, err
	}
	if len(d.Rate) == 0 {
		return d, fmt.Errorf("%s holds no result of BenchmarkRouterWithoutInbox", name)
	}
	return d, nil
}

// benchValue returns the value of res in unit, as the benchmark printed it.
func benchValue(res *benchfmt.Result, unit string) (float64, bool) {
	for _, v := range res.Values {
		if v.OrigUnit == unit {
			return v.OrigValue, true
		}
		if v.OrigUnit == "" && v.Unit == unit {
			return v.Value, true
		}
	}
	return 0, false
}

// inFlights are the counts of messages in flight the data holds, in order.
func (d curveData) inFlights() []int {
	var ns []int
	for k := range d.Rate {
		if !slices.Contains(ns, k.InFlight) {
			ns = append(ns, k.InFlight)
		}
	}
	sort.Ints(ns)
	return ns
}

// median is the median of xs, NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// curvesTable is the medians of every cell, and the ratios batch mode is held to at each count in flight: its
// throughput over the autocommit consumer's of the same client library (goal: at least 2), and its CPU per message
// over the router alone plus BenchmarkBatchFloor's 16-a-transaction CPU (goal: at most 2).
func curvesTable(d curveData) string {
	var b strings.Builder
	runs := 0
	for _, v := range d.Rate {
		runs = max(runs, len(v))
	}
	fmt.Fprintf(&b, "Medians of %d run(s) of each cell; msgs/s, then client CPU µs a message in brackets.\n\n", runs)
	ns := d.inFlights()
	b.WriteString("| mode |")
	for _, n := range ns {
		fmt.Fprintf(&b, " %d in flight |", n)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(ns)) + "\n")
	for _, m := range curveModes {
		if !d.has(m.Key) {
			continue
		}
		fmt.Fprintf(&b, "| %s |", m.Name)
		for _, n := range ns {
			k := curveKey{m.Key, n}
			fmt.Fprintf(&b, " %s (%s) |", cell(median(d.Rate[k]), 0), cell(median(d.CPU[k]), 1))
		}
		b.WriteString("\n")
	}
	floor := median(d.Floor[16])
	fmt.Fprintf(&b, "\nBenchmarkBatchFloor, 16 a transaction: %s µs a message.\n\n", cell(floor, 2))
	b.WriteString("| ratio | goal |")
	for _, n := range ns {
		fmt.Fprintf(&b, " %d in flight |", n)
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---|", len(ns)) + "\n")
	for _, lib := range []string{"", "-libpq"} {
		if !d.has("batch" + lib) {
			continue
		}
		name := map[string]string{"": "pgx", "-libpq": "lib/pq"}[lib]
		fmt.Fprintf(&b, "| batch throughput ÷ autocommit's (%s) | ≥ 2 |", name)
		for _, n := range ns {
			fmt.Fprintf(&b, " %s |", cell(median(d.Rate[curveKey{"batch" + lib, n}])/median(d.Rate[curveKey{"autocommit" + lib, n}]), 2))
		}
		fmt.Fprintf(&b, "\n| batch CPU ÷ (router alone + floor) (%s) | ≤ 2 |", name)
		for _, n := range ns {
			fmt.Fprintf(&b, " %s |", cell(median(d.CPU[curveKey{"batch" + lib, n}])/(median(d.CPU[curveKey{"none", n}])+floor), 2))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// has reports whether the data holds mode at some count in flight.
func (d curveData) has(mode string) bool {
	for k := range d.Rate {
		if k.Mode == mode {
			return true
		}
	}
	return false
}

// cell formats v with prec decimals and thousands separators, or "n/a" when it was not measured.
func cell(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	if prec == 0 {
		return thousands(math.Round(v))
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// curvesPlot draws the two panels side by side: throughput, and client CPU per message, against messages in
// flight, both axes logarithmic.
func curvesPlot(d curveData) string {
	return renderSVG(2*chartW, chartH+40, func(dc draw.Canvas) {
		tiles := draw.Tiles{Cols: 2, Rows: 1}
		d.panel(tiles.At(dc, 0, 0), "Throughput against messages in flight", "messages a second", d.Rate)
		d.panel(tiles.At(dc, 1, 0), "Client CPU a message against messages in flight", "client CPU µs a message", d.CPU)
	})
}

// panel draws one of the two panels: a line per mode through the medians of values.
func (d curveData) panel(dc draw.Canvas, title, yLabel string, values map[curveKey][]float64) {
	dc = drawHeader(dc, title, "pgxinbox BenchmarkRouterWithoutInbox, zero-work handlers; dashed: lib/pq")
	var legend []legendEntry
	p := newPlot("messages in flight", yLabel)
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker = plot.ConstantTicks(inFlightTicks(d.inFlights()))
	p.Y.Tick.Marker = logValueTicks{}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, m := range curveModes {
		var xys plotter.XYs
		for _, n := range d.inFlights() {
			if v := median(values[curveKey{m.Key, n}]); !math.IsNaN(v) && v > 0 {
				xys = append(xys, plotter.XY{X: float64(n), Y: v})
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
		if len(xys) == 0 {
			continue
		}
		style := draw.LineStyle{Color: parseColor(m.Color), Width: 1.75}
		if m.Dashed {
			style.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		line := &plotter.Line{XYs: xys, LineStyle: style}
		dots := &plotter.Scatter{XYs: xys, GlyphStyle: draw.GlyphStyle{Color: style.Color, Radius: 2.25, Shape: draw.CircleGlyph{}}}
		p.Add(line, dots)
		legend = append(legend, legendEntry{m.Name, line})
	}
	dc = drawLegend(dc, legend)
	dc = draw.Crop(dc, chartMargin/2, -chartMargin, 0, 0)
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	ns := d.inFlights()
	p.X.Min, p.X.Max = float64(ns[0])/1.3, float64(ns[len(ns)-1])*1.3
	p.Y.Min, p.Y.Max = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	p.Draw(dc)
}

// inFlightTicks mark each count in flight measured.
func inFlightTicks(ns []int) []plot.Tick {
	ticks := make([]plot.Tick, len(ns))
	for i, n := range ns {
		ticks[i] = plot.Tick{Value: float64(n), Label: strconv.Itoa(n)}
	}
	return ticks
}

// logValueTicks label 1, 2 and 5 times each power of ten of a log axis.
type logValueTicks struct{}

func (logValueTicks) Ticks(lo, hi float64) []plot.Tick {
	return logTicks(lo, hi, []float64{1, 2, 5}, func(v float64) string { return thousands(v) })
}

// replaceGenerated writes body into the file at path between the markers of name (<!-- name:begin --> and
// <!-- name:end -->), keeping what is outside them; a file without the markers gets them at its end.
func replaceGenerated(path, name, body string) error {
	begin, end := "<!-- "+name+":begin -->", "<!-- "+name+":end -->"
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	section := begin + "\n" + body + end + "\n"
	if len(old) == 0 {
		return os.WriteFile(path, []byte(section), 0o644)
	}
	return os.WriteFile(path, []byte(replaceMarked(string(old), begin, end, section)), 0o644)
}
