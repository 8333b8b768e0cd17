package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	inbox "github.com/effectively-once/watermill-inbox"
)

// The short form's defaults: what the harness's test runs, in seconds.
var (
	scaleLongSizes  = []int{100_000, 1_000_000, 10_000_000, 100_000_000}
	scaleShortSizes = []int{10_000, 100_000}
)

const (
	scaleShortMeasure = time.Second
	scaleShortSpan    = 3 * time.Hour
)

// parseScale reads the command's flags; --short sets the short form's defaults for the flags not given, and leaves
// --out empty, for a new temporary directory, unless it is given. Help and errors go to out.
func parseScale(args []string, out io.Writer) (scaleConfig, error) {
	fs := newFlagSet("scale")
	fs.Init("scale", flag.ContinueOnError)
	fs.SetOutput(out)
	var c scaleConfig
	fs.StringVar(&c.DSN, "dsn", defaultDSN, "PostgreSQL DSN (URL form); the tables are created and dropped in its database")
	sizes := fs.String("sizes", joinInts(scaleLongSizes), "retained rows of the tables, comma-separated, measured in this order")
	variants := fs.String("variants", scaleVariantNames(scaleVariants), "variants to measure, comma-separated, in this order")
	fs.Float64Var(&c.ExpiredShare, "expired-share", 0.01, fmt.Sprintf("expired rows as a share of the retained ones (at least %s, at most %s)",
		thousands(scaleMinExpired), thousands(scaleMaxExpired)))
	fs.DurationVar(&c.ExpiredSpan, "expired-span", 24*time.Hour, "time the expired rows spread over, ending an hour before the retention's cutoff (the partitions to drop)")
	fs.IntVar(&c.Consumers, "consumers", 4, "consumers the rows go round-robin over; the claims are the first one's")
	fs.IntVar(&c.Claimers, "claimers", 4, "claims in flight at once, one connection each")
	fs.DurationVar(&c.Measure, "measure", 20*time.Second, "how long the idle claims are measured, and the least the claims during the cleanup are")
	fs.IntVar(&c.Batch, "batch", inbox.DefaultCleanupBatch, "the cleanup's batch size (inbox.CleanupParams.BatchSize)")
	fs.DurationVar(&c.Pause, "pause", 0, "the cleanup's wait after each batch (inbox.CleanupParams.Pause; 0: the library's rest)")
	fs.StringVar(&c.Out, "out", "../docs/results/scale", "directory of the JSON records, README.md and claim-p99.svg")
	fs.BoolVar(&c.Replot, "replot", false, "rewrite README.md's generated section and claim-p99.svg from the records in --out, measuring nothing")
	short := fs.Bool("short", false, fmt.Sprintf("the short form: sizes %s, %s measurements, expired rows over %s, --out a new temporary "+
		"directory (flags given as well win)", joinInts(scaleShortSizes), scaleShortMeasure, scaleShortSpan))
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("scale: unexpected arguments %v", fs.Args())
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if *short {
		for name, set := range map[string]func(){"sizes": func() { *sizes = joinInts(scaleShortSizes) },
			"measure": func() { c.Measure = scaleShortMeasure }, "expired-span": func() { c.ExpiredSpan = scaleShortSpan },
			"out": func() { c.Out = "" }} {
			if !given[name] {
				set()
			}
		}
	}
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			return c, fmt.Errorf("scale: --sizes: bad size %q (want at least 2)", f)
		}
		c.Sizes = append(c.Sizes, n)
	}
	for _, f := range strings.Split(*variants, ",") {
		i := scaleRank(strings.TrimSpace(f))
		if i == len(scaleVariants) {
			return c, fmt.Errorf("scale: unknown variant %q (want one of %s)", f, scaleVariantNames(scaleVariants))
		}
		c.Variants = append(c.Variants, scaleVariants[i])
	}
	switch {
	case c.Replot && c.Out == "":
		return c, errors.New("scale: --replot needs --out")
	case c.ExpiredShare <= 0 || c.ExpiredShare > 1:
		return c, errors.New("scale: --expired-share must be above 0 and at most 1")
	case c.ExpiredSpan < time.Hour:
		return c, errors.New("scale: --expired-span must be an hour or more")
	case c.Consumers < 1 || c.Consumers > math.MaxInt16:
		return c, fmt.Errorf("scale: --consumers must be 1 to %d", math.MaxInt16)
	}
	return c, c.checkClaimsAndCleanup("scale")
}

// joinInts spells xs as a flag takes them: "1,2,3".
func joinInts(xs []int) string {
	return strings.Trim(strings.Join(strings.Fields(fmt.Sprint(xs)), ","), "[]")
}

func scaleVariantNames(vs []scaleVariant) string {
	names := make([]string, len(vs))
	for i, v := range vs {
		names[i] = v.Name
	}
	return strings.Join(names, ",")
}

// scaleRank is the place of a variant in scaleVariants, or past them for one the command does not know.
func scaleRank(name string) int {
	if i := slices.IndexFunc(scaleVariants, func(v scaleVariant) bool { return v.Name == name }); i >= 0 {
		return i
	}
	return len(scaleVariants)
}

func scaleCommand(ctx context.Context, args []string) error {
	c, err := parseScale(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if c.Out == "" {
		if c.Out, err = os.MkdirTemp("", "harness-scale-"); err != nil {
			return err
		}
	}
	start := time.Now()
	if _, err := runScale(ctx, c, os.Stderr); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%s scale: done in %s; report in %s\n", time.Now().Format("15:04:05"), time.Since(start).Round(time.Second), c.Out)
	return nil
}

// scaleRecord is one variant at one size, as `harness scale` writes it to <variant>-<rows>.json. The report and
// the plot are drawn from these files alone.
type scaleRecord struct {
	Variant string
	// Rows is the size: the live rows, within the retention. Expired is E, the rows older than the retention
	// that the cleanup removes; Loaded is what the COPYs reported, Rows + Expired.
	Rows, Expired                int
	Loaded                       int64
	Consumers, Claimers, Batch   int
	MeasureSeconds, PauseSeconds float64 // a pause of 0: the library's rest after each batch
	ExpiredSpanHours             float64
	Machine                      scaleMachine
	MeasuredAt                   time.Time
	// LoadSeconds is the COPYs' time, LoadRowsPerSec their rate; SettleSeconds is VACUUM ANALYZE and CHECKPOINT.
	LoadSeconds, LoadRowsPerSec, SettleSeconds float64
	Size                                       scaleSize
	Idle, Cleanup                              scaleWindow
	Removal                                    scaleRemoval
}

type scaleMachine struct {
	PostgreSQL, SharedBuffers string
	Cores                     int
}

// scaleSize is the table after the load and the settle, its partitions summed, per row loaded.
type scaleSize struct {
	HeapPerRow, IndexPerRow, PKeyPerRow, TotalPerRow float64
	DiskBytes                                        int64
	Partitions                                       int
	// PKeyLevel is bt_metap's level of the primary key (the largest partition's): a lookup reads PKeyLevel+1
	// pages of it.
	PKeyLevel int
	PKeyIndex string
}

// scaleWindow is the claims measured over one window.
type scaleWindow struct {
	Window                      string // what the window was
	Extended                    bool   // the cleanup ended before --measure had passed, and the claims went on to it
	TableRows                   int    // rows in the table when the claims began
	Claims                      int
	Seconds, PerSec             float64
	P50Ms, P99Ms, P999Ms, MaxMs float64
	// CacheHit is the share of the blocks of the table and its indexes that the window's backends found in
	// shared_buffers (HeapHit and IndexHit split it); a read may still come from the kernel's page cache. -1 when
	// no block was asked for.
	CacheHit, HeapHit, IndexHit float64
	BlocksHit, BlocksRead       int64
	CPUBusy                     float64
	WALBytes, Checkpoints       int64
}

// scaleRemoval is what the cleanup did.
type scaleRemoval struct {
	Kind                                    string
	Rows                                    int64
	Seconds                                 float64
	Batches, PartitionsDropped, ExpiredLeft int
}

// The report's files in --out, and the markers of README.md's generated part.
const (
	scaleReadme     = "README.md"
	scalePlotFile   = "claim-p99.svg"
	scaleBeginMark  = "<!-- scale:begin -->"
	scaleEndMark    = "<!-- scale:end -->"
	scaleMarkerNote = "<!-- Written by `harness scale` from the JSON records in this directory; `harness scale --replot` " +
		"writes it again. Edit outside the markers. -->"
)

func scaleRecordFile(variant string, rows int) string {
	return fmt.Sprintf("%s-%d.json", variant, rows)
}

func writeScaleRecord(dir string, r scaleRecord) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, scaleRecordFile(r.Variant, r.Rows)), append(raw, '\n'), 0o644)
}

// readScaleRecords reads every record in dir, in the report's order: the variants in scaleVariants' order, any
// other after them by name, each by size. A JSON file that is not a record is an error.
func readScaleRecords(dir string) ([]scaleRecord, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []scaleRecord
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var r scaleRecord
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if r.Variant == "" || r.Rows <= 0 {
			return nil, fmt.Errorf("%s: not a record of harness scale", p)
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b scaleRecord) int {
		return cmp.Or(scaleRank(a.Variant)-scaleRank(b.Variant), strings.Compare(a.Variant, b.Variant), a.Rows-b.Rows)
	})
	return out, nil
}

// writeScaleReport rewrites README.md's generated part and the plot from every record in dir. A README.md that
// does not exist yet is written with the prose of scaleProse, about machine (or, when machine is zero, the first
// record's); one without the markers gets the generated part at its end.
func writeScaleReport(dir string, machine scaleMachine) error {
	recs, err := readScaleRecords(dir)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		return fmt.Errorf("no record of harness scale in %s", dir)
	}
	if machine == (scaleMachine{}) {
		machine = recs[0].Machine
	}
	section := scaleBeginMark + "\n" + scaleMarkerNote + "\n\n" + scaleTable(recs) + "\n" + scaleEndMark + "\n"
	path := filepath.Join(dir, scaleReadme)
	old, err := os.ReadFile(path)
	var readme string
	switch {
	case errors.Is(err, fs.ErrNotExist):
		readme = scaleProse(machine) + "\n" + section
	case err != nil:
		return err
	default:
		readme = replaceMarked(string(old), scaleBeginMark, scaleEndMark, section)
	}
	if err := os.WriteFile(path, []byte(readme), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, scalePlotFile), []byte(scalePlot(recs)), 0o644)
}

// scaleTable is the generated part: the machines and settings of the records, the plot, and a row per record.
func scaleTable(recs []scaleRecord) string {
	var b strings.Builder
	var machines, settings []string
	for _, r := range recs {
		m := fmt.Sprintf("PostgreSQL %s, shared_buffers %s, %d cores", r.Machine.PostgreSQL, r.Machine.SharedBuffers, r.Machine.Cores)
		pause := "the library's rest after each batch"
		if r.PauseSeconds > 0 {
			pause = fmt.Sprintf("a pause of %s after each batch", time.Duration(r.PauseSeconds*float64(time.Second)))
		}
		s := fmt.Sprintf("%d claimers, %d consumers, --measure %s, expired rows over %g h, cleanup batches of %s rows and %s",
			r.Claimers, r.Consumers, time.Duration(r.MeasureSeconds*float64(time.Second)), r.ExpiredSpanHours, thousands(float64(r.Batch)), pause)
		if !slices.Contains(machines, m) {
			machines = append(machines, m)
		}
		if !slices.Contains(settings, s) {
			settings = append(settings, s)
		}
	}
	fmt.Fprintf(&b, "%d records. Machine: %s. Settings: %s.\n\n", len(recs), strings.Join(machines, "; "), strings.Join(settings, "; "))
	fmt.Fprintf(&b, "![claim p99 against retained rows](%s)\n\n", scalePlotFile)
	byKey := map[string]scaleRecord{}
	for _, r := range recs {
		byKey[fmt.Sprintf("%s/%d", r.Variant, r.Rows)] = r
	}
	var rows [][]string
	for _, r := range recs {
		ratio := func(a, b float64) string {
			if b <= 0 {
				return "–"
			}
			return fmt.Sprintf("%.2f", a/b)
		}
		tenth := "–"
		if r.Rows%10 == 0 {
			if s, ok := byKey[fmt.Sprintf("%s/%d", r.Variant, r.Rows/10)]; ok {
				tenth = ratio(r.Idle.P99Ms, s.Idle.P99Ms) + " / " + ratio(r.Cleanup.P99Ms, s.Cleanup.P99Ms)
			}
		}
		cleanup := fmt.Sprintf("%s rows in %s", thousands(float64(r.Removal.Rows)), secondsCell(r.Removal.Seconds))
		if r.Removal.PartitionsDropped > 0 {
			cleanup += fmt.Sprintf(", %d partitions dropped", r.Removal.PartitionsDropped)
		} else {
			cleanup += fmt.Sprintf(", %d batches", r.Removal.Batches)
		}
		if r.Cleanup.Extended {
			cleanup += fmt.Sprintf("; claims to %.0f s", r.Cleanup.Seconds)
		}
		rows = append(rows, []string{
			r.Variant, thousands(float64(r.Rows)), thousands(float64(r.Expired)),
			secondsCell(r.LoadSeconds) + ", " + thousands(math.Round(r.LoadRowsPerSec)) + "/s", secondsCell(r.SettleSeconds),
			fmt.Sprintf("%.1f / %.1f / %.1f", r.Size.HeapPerRow, r.Size.IndexPerRow, r.Size.TotalPerRow),
			fmt.Sprint(r.Size.PKeyLevel), scaleBytes(r.Size.DiskBytes),
			fmt.Sprintf("%.2f / %.2f / %.2f", r.Idle.P50Ms, r.Idle.P99Ms, r.Idle.P999Ms),
			thousands(math.Round(r.Idle.PerSec)), cleanup,
			fmt.Sprintf("%.2f / %.2f", r.Cleanup.P99Ms, r.Cleanup.P999Ms),
			ratio(r.Cleanup.P99Ms, r.Idle.P99Ms), tenth,
			percentCell(r.Idle.CacheHit) + " / " + percentCell(r.Cleanup.CacheHit),
		})
	}
	b.WriteString(markdownTable([]string{"Variant", "Retained rows", "Expired rows", "Load (rate)", "Settle",
		"Bytes/row heap / index / total", "PK level", "On disk", "Idle p50 / p99 / p99.9 ms", "Idle claims/s",
		"Cleanup", "Cleanup p99 / p99.9 ms", "Cleanup p99 ÷ idle p99", "p99 ÷ p99 at a tenth the rows (idle / cleanup)",
		"Cache hit (idle / cleanup)"}, rows))
	b.WriteString("\nBytes per row count every row in the table, expired ones included, and the consumers and produced " +
		"tables; PK level is bt_metap's level of the primary key (of its largest partition): a lookup reads level + 1 " +
		"of its pages. Cache hit is the share of the table's and its indexes' blocks found in shared_buffers during " +
		"the window, by pg_statio_user_tables and pg_statio_user_indexes; the others came from the kernel, whose page " +
		"cache may have held them, or are pages the table or an index grew by, which PostgreSQL counts as read.\n")
	return b.String()
}

// secondsCell formats a time in seconds to three significant digits, or in whole seconds from 100.
func secondsCell(s float64) string {
	if s >= 100 {
		return thousands(math.Round(s)) + " s"
	}
	return strconv.FormatFloat(s, 'g', 3, 64) + " s"
}

// percentCell formats a ratio as a percentage, or "–" for none.
func percentCell(r float64) string {
	if r < 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f%%", 100*r)
}

// scaleBytes formats a size in decimal units, as storage.go's figures are.
func scaleBytes(n int64) string {
	switch x := float64(n); {
	case x >= 1e9:
		return fmt.Sprintf("%.2f GB", x/1e9)
	case x >= 1e6:
		return fmt.Sprintf("%.1f MB", x/1e6)
	default:
		return fmt.Sprintf("%.0f kB", x/1e3)
	}
}

// scalePlot is the SVG of drawScalePlot.
func scalePlot(recs []scaleRecord) string {
	return renderSVG(chartW, chartH, func(dc draw.Canvas) { drawScalePlot(dc, recs) })
}

// drawScalePlot draws claim p99 against retained rows, both axes logarithmic: a solid line per variant idle and a
// dashed one of the same colour during the cleanup.
func drawScalePlot(dc draw.Canvas, recs []scaleRecord) {
	type line struct {
		name   string
		style  draw.LineStyle
		points plotter.XYs
	}
	var lines []line
	xLo, xHi, yLo, yHi := 1e5, 1e8, math.Inf(1), math.Inf(-1)
	byVariant := map[string][]scaleRecord{}
	var order []string
	for _, r := range recs {
		if _, ok := byVariant[r.Variant]; !ok {
			order = append(order, r.Variant)
		}
		byVariant[r.Variant] = append(byVariant[r.Variant], r)
	}
	for _, v := range order {
		colour := colorNeutral
		if i := scaleRank(v); i < len(scaleVariants) {
			colour = scaleVariants[i].Color
		}
		solid := draw.LineStyle{Color: parseColor(colour), Width: 2}
		dashed := solid
		dashed.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		idle, during := line{name: v + " idle", style: solid}, line{name: v + " during cleanup", style: dashed}
		for _, r := range byVariant[v] {
			x := float64(r.Rows)
			xLo, xHi = math.Min(xLo, x), math.Max(xHi, x)
			idle.points = append(idle.points, plotter.XY{X: x, Y: r.Idle.P99Ms})
			during.points = append(during.points, plotter.XY{X: x, Y: r.Cleanup.P99Ms})
			yLo, yHi = math.Min(yLo, math.Min(r.Idle.P99Ms, r.Cleanup.P99Ms)), math.Max(yHi, math.Max(r.Idle.P99Ms, r.Cleanup.P99Ms))
		}
		lines = append(lines, idle, during)
	}
	if math.IsInf(yLo, 1) || yLo <= 0 {
		yLo, yHi = 1, 10
	}
	yLo, yHi = math.Pow(10, math.Floor(math.Log10(yLo))), math.Pow(10, math.Ceil(math.Log10(yHi)))
	if yHi <= yLo {
		yHi = yLo * 10
	}
	subtitle := "p99 of claims through the middleware; solid: idle, dashed: during the cleanup"
	if len(recs) > 0 {
		m := recs[0].Machine
		subtitle += fmt.Sprintf("; PostgreSQL %s, shared_buffers %s, %d cores", m.PostgreSQL, m.SharedBuffers, m.Cores)
	}
	dc = drawHeader(dc, "Claim p99 as the inbox table grows", subtitle)
	var legend []legendEntry
	for _, l := range lines {
		legend = append(legend, legendEntry{l.name, &plotter.Line{LineStyle: l.style}})
	}
	dc = drawLegend(dc, legend)
	dc = draw.Crop(dc, chartMargin/2, -chartMargin, 0, 0)
	p := newPlot("retained rows", "claim p99 (ms)")
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = scaleRowTicks{}, scaleMsTicks{}
	for _, l := range lines {
		p.Add(&plotter.Line{XYs: l.points, LineStyle: l.style})
		dots := &plotter.Scatter{XYs: l.points}
		dots.GlyphStyle = draw.GlyphStyle{Color: l.style.Color, Radius: 2.5, Shape: draw.CircleGlyph{}}
		p.Add(dots)
	}
	p.X.Min, p.X.Max = math.Pow(10, math.Floor(math.Log10(xLo))), math.Pow(10, math.Ceil(math.Log10(xHi)))
	p.Y.Min, p.Y.Max = yLo, yHi
	p.Draw(dc)
}

// scaleRowTicks label the powers of ten of a log axis of rows as 100k, 1M, ..., with minor ticks between.
type scaleRowTicks struct{}

func (scaleRowTicks) Ticks(lo, hi float64) []plot.Tick {
	return logTicks(lo, hi, []float64{1}, func(v float64) string {
		switch {
		case v >= 1e9:
			return fmt.Sprintf("%gG", v/1e9)
		case v >= 1e6:
			return fmt.Sprintf("%gM", v/1e6)
		case v >= 1e3:
			return fmt.Sprintf("%gk", v/1e3)
		}
		return fmt.Sprintf("%g", v)
	})
}

// scaleMsTicks label 1, 2 and 5 times the powers of ten of a log axis of milliseconds.
type scaleMsTicks struct{}

func (scaleMsTicks) Ticks(lo, hi float64) []plot.Tick {
	return logTicks(lo, hi, []float64{1, 2, 5}, func(v float64) string { return fmt.Sprintf("%g", v) })
}

// logTicks are the ticks of a log axis from lo to hi: m times each power of ten for m of 1 to 9, labelled where m
// is one of labelled.
func logTicks(lo, hi float64, labelled []float64, label func(float64) string) []plot.Tick {
	var ticks []plot.Tick
	for e := int(math.Floor(math.Log10(lo))); e <= int(math.Ceil(math.Log10(hi))); e++ {
		for m := 1.0; m < 10; m++ {
			v := m * math.Pow10(e)
			if e < 0 {
				v = m / math.Pow10(-e) // 0.3, not 0.30000000000000004
			}
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if slices.Contains(labelled, m) {
				t.Label = label(v)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// scaleProse is README.md's hand-written part as the command first writes it; the command never rewrites it. In
// the text, ´ stands for a backquote, which a raw string cannot hold.
func scaleProse(m scaleMachine) string {
	return strings.ReplaceAll(`# Claim latency as the inbox table grows

´harness scale´ measures what the inbox's claim costs as its table grows to 10^8 retained rows, with nothing else
running and while the retention cleanup removes the expired rows, for three kinds of inbox table:

- ´uuid7´: event IDs stored as uuid (´inbox.WithIDType(inbox.IDTypeUUID)´), UUIDv7 IDs, a plain table. The cleanup
  is ´Database.Cleanup´'s batched delete.
- ´uuid7-partitioned´: the same IDs in a table of hourly partitions (´inbox.WithPartitions(time.Hour)´). The cleanup
  is ´Database.Cleanup´ with the same option, which detaches and drops the expired partitions.
- ´text´: event IDs stored as text, the default. The IDs are UUID-shaped strings spread uniformly over the key
  space, and the claims carry random v4 strings, so the claims land all over the primary key as a user's string
  IDs do. Batched delete.

For each variant and each size N, in that order, the command:

1. creates a fresh table with ´Database.Migrate´;
2. loads E expired rows (´--expired-share´ of N, at least 1,000 and at most 1,000,000) older than
   ´inbox.DefaultRetention´, spread over ´--expired-span´ ending an hour before the retention's cutoff, then N live
   rows spread from a day short of the retention to a minute ago, round-robin over ´--consumers´ consumers
   registered in the consumers table: one COPY of a million rows per transaction, in primary-key order, so that
   every index fills by appending. A UUIDv7 ID carries its row's millisecond; in the partitioned table each row
   lands in its hour's partition, created beforehand as the library's partition maintenance names and bounds them.
   Then VACUUM ANALYZE and CHECKPOINT, which make the rows as old as they claim to be;
3. reads the table's size, its partitions summed: bytes per row (heap, indexes, total, as ´harness storage´ counts
   them), the primary key's bt_metap level, the bytes on disk;
4. measures ´--claimers´ goroutines claiming new IDs of the variant's kind through the library's middleware (one
   small UPDATE in each claim's transaction), first for ´--measure´ with nothing else running, then, after a
   CHECKPOINT, while the cleanup removes the E expired rows: for as long as the cleanup runs, and on until
   ´--measure´ has passed since it started when it is shorter (the record says which). Each window gives p50, p99,
   p99.9 and claims/s, and the buffer cache hit ratio of the table and its indexes. The command checks that the
   cleanup removed exactly E rows and left no expired row;
5. drops the table.

Each result is written as it completes to ´<variant>-<rows>.json´ in this directory; every invocation then rewrites
the generated part below and ´claim-p99.svg´ from all the records here, so a long run can be split into
invocations and resumed.

What the load changes against a table that grew by itself: every index fills by appending, so the text variant's
primary key has its leaf pages filled to the B-tree's fillfactor rather than left half to fully full by the page
splits of random inserts, and is smaller than it would be; the heap is in ID order, which for UUIDv7 is time order
as in production, but for the text variant puts the expired rows together at the low end of the primary key
instead of spread through it, so the batched delete touches fewer of its pages than it would.

## Commands

From the harness module (´cd harness´):

´´´
go run . scale                                                 # every variant at every size
go run . scale --variants uuid7 --sizes 10000000               # one variant at one size, added to the records
go run . scale --variants uuid7,uuid7-partitioned,text --sizes 100000000
go run . scale --replot                                        # the report and the plot from the records only
go run . scale --short                                         # the test's form, into a temporary directory
´´´

## Machine

This file was first written against PostgreSQL `+m.PostgreSQL+` with shared_buffers `+m.SharedBuffers+`, on `+
		fmt.Sprint(m.Cores)+` cores; the generated part names the machine of every record.
`, "´", "`")
}
