package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The short form of `harness cleanup-latency`, as CI runs it, three times: the claims' p99 while the library's
// cleanup deletes 100,000 expired rows, and while it drops the partitions that hold as many, must stay within three
// times their p99 on a table of those rows with no cleanup running, as the median of the three runs' ratios. One
// run measures the claims for about a second, a few hundred of them beside the drops: a single stall of the
// machine moves its p99 more than the cleanup does.
func TestCleanupLatency_ClaimP99DuringTheBatchedDeleteAndThePartitionDropStaysWithinThreeTimesIdle(t *testing.T) {
	db := storageTestDB(t)
	logTo(t)
	c, err := parseCleanupLatency([]string{"--short", "--runs", "3", "--dsn", testDSN()}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := runCleanupLatency(context.Background(), c, testProgress{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("short form in %s:\n%s", time.Since(start).Round(time.Second), latencyReport(c, res))
	got := map[string]latencySample{} // each scenario's last run
	runs := map[string][]latencySample{}
	for _, s := range res {
		got[s.Scenario] = s
		runs[s.Scenario] = append(runs[s.Scenario], s)
	}
	medianRatio := func(scenario string) float64 {
		var xs []float64
		for _, s := range runs[scenario] {
			xs = append(xs, s.Ratio)
		}
		return spreadOf(xs).Median
	}
	for _, sc := range latencyScenarios(c) {
		s, ok := got[sc.Name]
		if !ok {
			t.Fatalf("scenario %q was not measured", sc.Name)
		}
		if s.Claims < 100 {
			t.Errorf("%s: %d claims measured, too few for a p99", sc.Name, s.Claims)
		}
	}
	del := got["batched delete"]
	if del.Removed != int64(c.Rows) || del.Batches < 2 {
		t.Fatalf("the cleanup deleted %d of %d expired rows in %d batches: it did not run beside the claims as measured",
			del.Removed, c.Rows, del.Batches)
	}
	if del.Ratio <= 0 {
		t.Fatal("no p99 ratio for the batched delete: its baseline was not measured in the same run")
	}
	if r := medianRatio("batched delete"); r > 3 {
		t.Errorf("claim p99 during the batched delete is %.2f times the idle p99 (median of the runs; the last: %s against %s): the cleanup slows the claims beside it",
			r, ms(del.P99), ms(got["idle"].P99))
	}
	// A day of expired rows in partitions of an hour: some twenty-five drops, one transaction each.
	drop := got["partition drop"]
	if drop.Removed != int64(c.Rows) || drop.Batches < 20 {
		t.Fatalf("the partitioned cleanup removed %d of %d expired rows in %d statements: it did not drop their partitions beside the claims",
			drop.Removed, c.Rows, drop.Batches)
	}
	if drop.Ratio <= 0 {
		t.Fatal("no p99 ratio for the partition drop: its baseline was not measured in the same run")
	}
	if r := medianRatio("partition drop"); r > 3 {
		t.Errorf("claim p99 during the partition drop is %.2f times the idle p99 (median of the runs; the last: %s against %s): the drops slow the claims beside them",
			r, ms(drop.P99), ms(got["idle"].P99))
	}
	expectNoRelationsLeft(t, db, "cleanlat")
}

// expectNoRelationsLeft fails t if a relation of this process's measurements of kind (the middle of their tables'
// names: harness_<kind>_<pid>_...) is still in the database.
func expectNoRelationsLeft(t *testing.T, db *sql.DB, kind string) {
	t.Helper()
	var left []string
	rows, err := db.Query(`SELECT relname FROM pg_class WHERE relname LIKE 'harness\_' || $1 || '\_' || $2 || '\_%'`, kind, strconv.Itoa(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		left = append(left, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("the measurement left relations behind: %v", left)
	}
}

func TestParseCleanupLatency_ShortSetsTheShortFormWhereNoFlagSaysOtherwise(t *testing.T) {
	t.Parallel()
	long, err := parseCleanupLatency(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if long.Rows != 1_000_000 || long.GrowthRows != 10_000_000 || long.Runs != 3 || long.Claimers != 4 || long.SmallRows != 10_000 {
		t.Errorf("long form: %+v", long)
	}
	short, err := parseCleanupLatency([]string{"--short", "--rows", "5000"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if short.Rows != 5000 || short.GrowthRows != latencyShort.GrowthRows || short.Runs != 1 || short.Measure != latencyShort.Measure {
		t.Errorf("--short --rows 5000: %+v", short)
	}
	if len(short.Scenarios) != 4 {
		t.Errorf("scenarios %v, want all four", short.Scenarios)
	}
	for _, args := range [][]string{{"--scenarios", "idle,partition"}, {"--claimers", "0"}, {"--batch", "0"}, {"--pause", "-1s"}, {"extra"}} {
		if _, err := parseCleanupLatency(args, io.Discard); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	if _, err := parseCleanupLatency([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
}

func TestPercentile_IsTheNearestRank(t *testing.T) {
	t.Parallel()
	var xs []time.Duration
	for i := 100; i >= 1; i-- {
		xs = append(xs, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[float64]time.Duration{0.5: 50 * time.Millisecond, 0.99: 99 * time.Millisecond, 1: 100 * time.Millisecond} {
		if got := percentile(xs, p); got != want {
			t.Errorf("p%.0f of 1..100 ms: %s, want %s", p*100, got, want)
		}
	}
	if got := percentile([]time.Duration{7}, 0.99); got != 7 {
		t.Errorf("p99 of one value: %s", got)
	}
}

// Each run's ratio divides by the baseline of the same run, so a slow run of the machine cancels out, and the
// report shows their median.
func TestLatencyReport_DividesEachRunsP99ByItsBaselineOfTheSameRun(t *testing.T) {
	t.Parallel()
	c := latencyConfig{Rows: 1000, SmallRows: 10_000, GrowthRows: 20_000, Claimers: 4, Runs: 3, Batch: 100,
		Scenarios: []string{"idle", "batched-delete"}}
	sample := func(name string, run int, p99 time.Duration) latencySample {
		s := latencySample{Scenario: name, Run: run, TableRows: 1000, Claims: 500, Elapsed: time.Second,
			P50: time.Millisecond, P99: p99, Max: 2 * p99}
		s.ClaimStates = map[string]int{"CPU": 300, "IO:WALSync": 99, "Lock:transactionid": 1}
		if name == "batched delete" {
			s.Removed, s.RemoveTook, s.Batches = 1000, 500*time.Millisecond, 11
			s.CleanStates = map[string]int{"CPU": 1}
		}
		return s
	}
	res := []latencySample{
		sample("idle", 1, 2*time.Millisecond), sample("batched delete", 1, 3*time.Millisecond), // 1.5
		sample("batched delete", 2, 40*time.Millisecond), sample("idle", 2, 20*time.Millisecond), // 2.0, the machine slow
		sample("idle", 3, 4*time.Millisecond), sample("batched delete", 3, 4*time.Millisecond), // 1.0
	}
	scenarios := latencyScenarios(c)
	latencyRatios(scenarios, res)
	if res[3].Ratio != 0 || res[2].Ratio != 2 {
		t.Fatalf("ratios %v and %v, want 0 for idle and 2 for run 2's delete", res[3].Ratio, res[2].Ratio)
	}
	out := latencyReport(c, res)
	for _, want := range []string{
		"| batched delete | 1,000 | 500 | 1.00 ms | 4.00 (3.00–40.00) ms | 8.0 (6.0–80.0) ms |",
		"1.50 (1.00–2.00) × idle | 2,000 | 0.5 s |",
		"p99 batched delete / p99 idle: **1.50** (per run: 1.50, 2.00, 1.00)",
		"| idle | CPU 75%, IO:WALSync 25% | 3 of 1,200 (Lock:transactionid 3) | – | none |", // 0.25%: named here only
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "growth") {
		t.Errorf("report shows a scenario that was not measured:\n%s", out)
	}
}

// The idle claims are measured for as long as the batched delete took, right after it; without the delete they
// keep their place and --measure.
func TestLatencyOrder_MeasuresIdleRightAfterTheBatchedDelete(t *testing.T) {
	t.Parallel()
	c := latencyConfig{SmallRows: 10, GrowthRows: 20}
	names := func(ss []latencyScenario) string {
		var out []string
		for _, s := range ss {
			out = append(out, s.Name)
		}
		return strings.Join(out, ", ")
	}
	all := latencyScenarios(c)
	if got, want := names(latencyOrder(all)), "batched delete, idle, partition drop, idle partitioned, growth: 10 rows, growth: 20 rows"; got != want {
		t.Errorf("order %q, want %q", got, want)
	}
	if got, want := names(latencyOrder([]latencyScenario{all[0], all[2], all[3], all[4]})), "idle, partition drop, idle partitioned, growth: 10 rows"; got != want {
		t.Errorf("without the delete: order %q, want %q", got, want)
	}
}
