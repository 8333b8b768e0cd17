package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// curvesSample is benchmark output as `go test -bench` prints it: two runs of two modes at two counts in flight,
// a lib/pq row with a run missing, the floor, and a line of another benchmark that the command passes over.
const curvesSample = `goos: linux
goarch: amd64
pkg: github.com/effectively-once/watermill-inbox/pgxinbox
BenchmarkRouterWithoutInbox/inflight=1/mode=none-2         	   20000	      7751 ns/op	        10.00 cpu-µs/msg	    100000 msgs/s
BenchmarkRouterWithoutInbox/inflight=1/mode=autocommit-2   	   20000	    175513 ns/op	       100.0 cpu-µs/msg	      2000 msgs/s	         1.000 rt/msg
BenchmarkRouterWithoutInbox/inflight=1/mode=batch-2        	   20000	     80962 ns/op	        80.00 cpu-µs/msg	        1.000 msgs/commit	      1000 msgs/s
BenchmarkRouterWithoutInbox/inflight=64/mode=none-2        	   20000	      7751 ns/op	        12.00 cpu-µs/msg	    130000 msgs/s
BenchmarkRouterWithoutInbox/inflight=64/mode=none-2        	   20000	      7751 ns/op	        14.00 cpu-µs/msg	    120000 msgs/s
BenchmarkRouterWithoutInbox/inflight=64/mode=autocommit-2  	   20000	    175513 ns/op	       100.0 cpu-µs/msg	      5000 msgs/s
BenchmarkRouterWithoutInbox/inflight=64/mode=autocommit-2  	   20000	    175513 ns/op	       110.0 cpu-µs/msg	      6000 msgs/s
BenchmarkRouterWithoutInbox/inflight=64/mode=batch-2       	   20000	     80962 ns/op	        40.00 cpu-µs/msg	        25.00 msgs/commit	     12000 msgs/s
BenchmarkRouterWithoutInbox/inflight=64/mode=batch-2       	   20000	     80962 ns/op	        60.00 cpu-µs/msg	        25.00 msgs/commit	     10000 msgs/s
BenchmarkRouterWithoutInbox/inflight=64/mode=batch-libpq-2 	   20000	     80962 ns/op	       300.0 cpu-µs/msg	       900 msgs/s
BenchmarkRouterBatch/inflight=64/work=none/mode=batch-2    	   20000	     80962 ns/op	        50.00 cpu-µs/msg	     99999 msgs/s
BenchmarkBatchFloor/size=16-2                              	   20000	     40928 ns/op	         9.000 cpu-µs/msg	     24434 msgs/s
BenchmarkBatchFloor/size=16-2                              	   20000	     40928 ns/op	        11.00 cpu-µs/msg	     24434 msgs/s
BenchmarkBatchFloor/size=64-2                              	   20000	     20117 ns/op	         4.729 cpu-µs/msg	     49790 msgs/s
PASS
`

func TestCurves_TheTableHoldsTheMediansAndTheRatios(t *testing.T) {
	d, err := readCurves(strings.NewReader(curvesSample), "sample")
	if err != nil {
		t.Fatal(err)
	}
	table := curvesTable(d)
	for _, want := range []string{
		"| mode | 1 in flight | 64 in flight |",
		"| router alone, no database | 100,000 (10.0) | 125,000 (13.0) |",
		"| inbox batch (pgx) | 1,000 (80.0) | 11,000 (50.0) |",
		"| inbox batch (lib/pq) | n/a (n/a) | 900 (300.0) |",
		"16 a transaction: 10.00 µs",
		// 11,000 / 5,500 at 64 in flight; 1,000 / 2,000 at 1.
		"| batch throughput ÷ autocommit's (pgx) | ≥ 2 | 0.50 | 2.00 |",
		// 50 / (13 + 10) at 64; 80 / (10 + 10) at 1.
		"| batch CPU ÷ (router alone + floor) (pgx) | ≤ 2 | 4.00 | 2.17 |",
		// lib/pq has no autocommit row in the sample: its ratio is not made up.
		"| batch throughput ÷ autocommit's (lib/pq) | ≥ 2 | n/a | n/a |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "99,999") {
		t.Errorf("the table holds a result of another benchmark:\n%s", table)
	}
}

func TestCurves_TheCommandDrawsTheRecordAndKeepsTheProse(t *testing.T) {
	dir := t.TempDir()
	record := filepath.Join(dir, "bench.txt")
	if err := os.WriteFile(record, []byte(curvesSample), 0o644); err != nil {
		t.Fatal(err)
	}
	prose := "# Curves\n\nWritten by hand.\n"
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte(prose), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second run replaces the generated part instead of adding another
		if err := runCurves([]string{"-bench", record}); err != nil {
			t.Fatal(err)
		}
	}
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(readme), prose) || strings.Count(string(readme), "<!-- curves:begin -->") != 1 ||
		!strings.Contains(string(readme), "| inbox batch (pgx) |") {
		t.Errorf("README.md after two runs:\n%s", readme)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "curves.svg"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(svg)
	if !strings.HasPrefix(strings.TrimSpace(s), "<?xml") || !strings.Contains(s, "</svg>") {
		t.Fatalf("curves.svg is not an SVG document: %.200s", s)
	}
	// Four modes have results: each is in both panels' legends.
	for _, name := range []string{"router alone, no database", "autocommit, no inbox (pgx)", "inbox batch (pgx)", "inbox batch (lib/pq)"} {
		if n := strings.Count(s, ">"+name+"<"); n != 2 {
			t.Errorf("%q is in %d legends, want 2", name, n)
		}
	}
	if strings.Contains(s, ">inbox per message (pgx)<") {
		t.Error("the legend names a mode the record has no result of")
	}
}
