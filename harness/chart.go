package main

import (
	"image/color"
	"math"
	"strconv"
	"strings"

	xfont "golang.org/x/image/font"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The charts are drawn with gonum/plot and written as SVG by its vgsvg backend, which writes text as <text>
// elements naming the font (Liberation Sans, embedded in gonum/plot for measuring) without embedding it, so the
// files stay small and their labels stay searchable.
func init() {
	plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"}
	plotter.DefaultFont = plot.DefaultFont
}

// series is one colour of bars in a bar chart: a value per category, with an optional min-max whisker.
type series struct {
	Name   string
	Color  string
	Values []float64
	Lo, Hi []float64 // whiskers; nil for none
	Hollow bool      // drawn as an outline: figures quoted from elsewhere, not measured here
}

// barChart is a grouped bar chart: a group of bars per category, a bar per series. A NaN value is a bar that was
// not measured; it is drawn as "n/a".
type barChart struct {
	Title      string
	Subtitle   string
	YLabel     string
	Categories []string
	Series     []series
	// Log draws the value axis as log10(1+v), so that 5 and 15 stay visible beside 30,000 and 0 still sits on
	// the axis.
	Log bool
}

// The size of one chart, in points (1/72 inch): about 850×450 CSS pixels.
const chartW, chartH vg.Length = 640, 340

var (
	axisColor   = color.Gray{Y: 0x44}
	gridColor   = color.Gray{Y: 0xdd}
	legendSize  = vg.Length(10)
	valueSize   = vg.Length(8)
	chartMargin = vg.Length(10)
)

// svg renders the chart on its own. Every bar carries its value as a label, so a bar too short to see still
// says what it is.
func (c barChart) svg() string {
	return renderSVG(chartW, chartH, c.draw)
}

// chartGrid lays charts out in a grid of cols columns, row by row, as one SVG.
func chartGrid(charts []barChart, cols int) string {
	cols = max(1, min(cols, len(charts)))
	rows := max(1, (len(charts)+cols-1)/cols)
	return renderSVG(chartW*vg.Length(cols), chartH*vg.Length(rows), func(dc draw.Canvas) {
		tiles := draw.Tiles{Cols: cols, Rows: rows}
		for i, c := range charts {
			c.draw(tiles.At(dc, i%cols, i/cols))
		}
	})
}

// renderSVG draws on an SVG canvas of w×h and returns the document.
func renderSVG(w, h vg.Length, drawOn func(draw.Canvas)) string {
	cv := vgsvg.New(w, h) // fonts are named, not embedded
	dc := draw.New(cv)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	drawOn(dc)
	var b strings.Builder
	if _, err := cv.WriteTo(&b); err != nil { // a strings.Builder does not fail
		panic(err)
	}
	return b.String()
}

// draw draws the chart on dc: its title and subtitle, the plot, and a legend beneath.
func (c barChart) draw(dc draw.Canvas) {
	dc = drawHeader(dc, c.Title, c.Subtitle)
	var legend []legendEntry
	for _, s := range c.Series {
		legend = append(legend, legendEntry{s.Name, s.bar(0, 0)})
	}
	dc = drawLegend(dc, legend)
	dc = draw.Crop(dc, chartMargin/2, -chartMargin, 0, 0)

	p := newPlot("", c.YLabel)
	if len(c.Categories) > 0 {
		p.NominalX(c.Categories...)
	}
	top := 0.0
	for _, s := range c.Series {
		for i, v := range s.Values {
			if math.IsNaN(v) { // a bar that was not measured
				continue
			}
			top = math.Max(top, v)
			if s.Hi != nil {
				top = math.Max(top, s.Hi[i])
			}
		}
	}
	yMax := math.Max(top*1.05, 1)
	if c.Log {
		yMax = math.Pow(10, math.Ceil(math.Log10(math.Max(top, 1))))
		p.Y.Scale = log1pScale{}
		p.Y.Tick.Marker = log1pTicks{}
		// gonum centres the axis label by value, not by page, which on this scale would push the plot down.
		p.Y.Label.Position = draw.PosTop
		dc = draw.Crop(dc, 0, 0, 0, -12)
	}

	// Each group spans 0.8 of a category; each bar is centred in its share of the group.
	slot := 0.8 / float64(max(1, len(c.Series)))
	var bars []*plotter.BarChart
	values := &plotter.Labels{}
	for si, s := range c.Series {
		whiskers := &plotter.YErrorBars{LineStyle: draw.LineStyle{Color: axisColor, Width: 1}, CapWidth: 6}
		for ci := range c.Categories {
			x := float64(ci) - 0.4 + slot*(float64(si)+0.5)
			v := s.Values[ci]
			label, labelAt := "n/a", 0.0
			if !math.IsNaN(v) {
				b := s.bar(x, v)
				bars = append(bars, b)
				p.Add(b)
				label, labelAt = thousands(v), v
				if s.Hi != nil && s.Hi[ci] > s.Lo[ci] {
					whiskers.XYs = append(whiskers.XYs, plotter.XY{X: x, Y: v})
					whiskers.YErrors = append(whiskers.YErrors, struct{ Low, High float64 }{v - s.Lo[ci], s.Hi[ci] - v})
					labelAt = math.Max(labelAt, s.Hi[ci])
				}
			}
			values.XYs = append(values.XYs, plotter.XY{X: x, Y: labelAt})
			values.Labels = append(values.Labels, label)
			values.TextStyle = append(values.TextStyle, textStyle(valueSize, false, color.Black, draw.XCenter, draw.YBottom))
		}
		if len(whiskers.XYs) > 0 {
			p.Add(whiskers)
		}
	}
	values.Offset = vg.Point{Y: 2}
	p.Add(values)
	p.X.Min, p.X.Max = -0.5, float64(len(c.Categories))-0.5
	p.Y.Min, p.Y.Max = 0, yMax*1.001

	// Bar widths are lengths on the page: measure a slot once the axes are laid out.
	area := p.DataCanvas(dc)
	trX, _ := p.Transforms(&area)
	width := (trX(slot) - trX(0)) * 0.88
	for _, b := range bars {
		b.Width = width
	}
	p.Draw(dc)
}

// bar is one bar of s, at x, of height v.
func (s series) bar(x, v float64) *plotter.BarChart {
	b := &plotter.BarChart{Values: plotter.Values{v}, XMin: x, Width: 10, Color: parseColor(s.Color)}
	if s.Hollow {
		b.LineStyle = draw.LineStyle{Color: b.Color, Width: 1.5}
		b.Color = color.White
	}
	return b
}

// timeline is a line chart of one run's progress, with the faults drawn on it: the database's outages as bands,
// and each round of terminated backends as a tick on the time axis.
type timeline struct {
	Title, Subtitle string
	Points          []progressSample
	Bands           [][2]float64
	Marks           []float64
}

func (tl timeline) svg() string {
	return renderSVG(chartW, chartH, tl.draw)
}

func (tl timeline) draw(dc draw.Canvas) {
	line := draw.LineStyle{Color: parseColor(colorInbox), Width: 2}
	mark := draw.LineStyle{Color: parseColor(colorNeutral), Width: 1.5}
	r, g, b, _ := parseColor(colorDup).RGBA()
	band := color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: uint8(math.Round(0.18 * 255))}

	dc = drawHeader(dc, tl.Title, tl.Subtitle)
	dc = drawLegend(dc, []legendEntry{
		{"events credited", &plotter.Line{LineStyle: line}},
		{"PostgreSQL restarting", &plotter.Polygon{Color: band}},
		{"backends terminated mid-transaction", &plotter.Line{LineStyle: mark}},
	})
	dc = draw.Crop(dc, chartMargin/2, -chartMargin, 0, 0)

	p := newPlot("seconds since the consumer started working", "events credited")
	xMax, yMax := 1.0, 1.0
	var pts plotter.XYs
	for _, pt := range tl.Points {
		xMax, yMax = math.Max(xMax, pt.At), math.Max(yMax, float64(pt.Credited))
		pts = append(pts, plotter.XY{X: pt.At, Y: float64(pt.Credited)})
	}
	yMax *= 1.05
	for _, bd := range tl.Bands {
		p.Add(&plotter.Polygon{Color: band, XYs: []plotter.XYs{{{X: bd[0], Y: 0}, {X: bd[1], Y: 0}, {X: bd[1], Y: yMax}, {X: bd[0], Y: yMax}}}})
	}
	if len(pts) > 0 {
		p.Add(&plotter.Line{XYs: pts, LineStyle: line})
	}
	for _, m := range tl.Marks {
		p.Add(&plotter.Line{XYs: plotter.XYs{{X: m, Y: 0}, {X: m, Y: yMax * 0.04}}, LineStyle: mark})
	}
	p.X.Min, p.X.Max = 0, xMax
	p.Y.Min, p.Y.Max = 0, yMax
	p.Draw(dc)
}

// newPlot is a plot with the harness's axis labels, thousands-separated ticks and horizontal grid lines.
func newPlot(xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.X.Label.Text, p.Y.Label.Text = xLabel, yLabel
	p.X.Label.TextStyle.Font.Size, p.Y.Label.TextStyle.Font.Size = 10, 10
	p.X.Tick.Label.Font.Size, p.Y.Tick.Label.Font.Size = 9, 9
	p.X.LineStyle.Color, p.Y.LineStyle.Color = axisColor, axisColor
	p.X.Tick.Marker, p.Y.Tick.Marker = thousandsTicks{}, thousandsTicks{}
	grid := plotter.NewGrid()
	grid.Vertical.Color = nil
	grid.Horizontal = draw.LineStyle{Color: gridColor, Width: 0.75}
	p.Add(grid)
	return p
}

// drawHeader writes the title and subtitle along the top of dc and returns the canvas below them.
func drawHeader(dc draw.Canvas, title, subtitle string) draw.Canvas {
	at := vg.Point{X: dc.Min.X + chartMargin, Y: dc.Max.Y - chartMargin}
	for _, t := range []struct {
		s   string
		sty text.Style
	}{
		{title, textStyle(14, true, color.Black, draw.XLeft, draw.YTop)},
		{subtitle, textStyle(10, false, color.Gray{Y: 0x55}, draw.XLeft, draw.YTop)},
	} {
		if t.s == "" {
			continue
		}
		dc.FillText(t.sty, at, t.s)
		at.Y -= t.sty.Rectangle(t.s).Size().Y + 4
	}
	dc.Max.Y = at.Y - 4
	return dc
}

type legendEntry struct {
	name  string
	thumb plot.Thumbnailer
}

// drawLegend lays the entries out in columns along the bottom of dc and returns the canvas above them.
func drawLegend(dc draw.Canvas, entries []legendEntry) draw.Canvas {
	if len(entries) == 0 {
		return dc
	}
	rows := (len(entries) + 2) / 3
	cols := (len(entries) + rows - 1) / rows
	l := plot.NewLegend()
	l.TextStyle.Font.Size = legendSize
	l.Top, l.Left, l.Padding, l.ThumbnailWidth = true, true, 3, 14
	rowH := l.TextStyle.Rectangle("Ág").Size().Y + l.Padding
	strip := dc
	strip.Max.Y = dc.Min.Y + vg.Length(rows)*rowH + chartMargin
	tiles := draw.Tiles{Cols: cols, Rows: 1, PadLeft: chartMargin, PadRight: chartMargin, PadX: chartMargin}
	for col := range cols {
		cl := l
		for _, e := range entries[col*rows : min(len(entries), (col+1)*rows)] {
			cl.Add(e.name, e.thumb)
		}
		cl.Draw(tiles.At(strip, col, 0))
	}
	dc.Min.Y = strip.Max.Y + 2
	return dc
}

func textStyle(size vg.Length, bold bool, c color.Color, x draw.XAlignment, y draw.YAlignment) text.Style {
	f := plot.DefaultFont
	if bold {
		f.Weight = xfont.WeightBold
	}
	return text.Style{Color: c, Font: font.From(f, size), XAlign: x, YAlign: y, Handler: plot.DefaultTextHandler}
}

// parseColor reads "#rgb" or "#rrggbb"; anything else is black.
func parseColor(hex string) color.Color {
	h := strings.TrimPrefix(hex, "#")
	if len(h) == 3 {
		h = string([]byte{h[0], h[0], h[1], h[1], h[2], h[2]})
	}
	v, err := strconv.ParseUint(h, 16, 32)
	if err != nil || len(h) != 6 {
		return color.Black
	}
	return color.RGBA{R: uint8(v >> 16), G: uint8(v >> 8), B: uint8(v), A: 255}
}

// thousandsTicks are gonum's default ticks, labelled like the tables.
type thousandsTicks struct{}

func (thousandsTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = thousands(ticks[i].Value)
		}
	}
	return ticks
}

// log1pScale maps v to log10(1+v), so that 0 sits on a log axis.
type log1pScale struct{}

func (log1pScale) Normalize(lo, hi, v float64) float64 {
	l := math.Log1p(math.Max(lo, 0))
	return (math.Log1p(math.Max(v, 0)) - l) / (math.Log1p(hi) - l)
}

// log1pTicks marks 0 and the powers of ten up to hi, with minor ticks between.
type log1pTicks struct{}

func (log1pTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := []plot.Tick{{Value: 0, Label: "0"}}
	for p := 1.0; p <= hi; p *= 10 {
		ticks = append(ticks, plot.Tick{Value: p, Label: thousands(p)})
		for m := 2.0; m < 10 && p*m <= hi; m++ {
			ticks = append(ticks, plot.Tick{Value: p * m})
		}
	}
	return ticks
}
