package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// latencyReport renders the samples as markdown: a row per scenario with the medians over the runs and the ratios
// to the baselines, the ratios the measurement exists for, and what the database and the machine did meanwhile.
func latencyReport(c latencyConfig, samples []latencySample) string {
	scenarios := latencyScenarios(c)
	byName := map[string][]latencySample{}
	for _, s := range samples {
		byName[s.Scenario] = append(byName[s.Scenario], s)
	}
	of := func(ss []latencySample, f func(latencySample) float64) spread {
		xs := make([]float64, 0, len(ss))
		for _, s := range ss {
			xs = append(xs, f(s))
		}
		return spreadOf(xs)
	}
	msOf := func(f func(latencySample) time.Duration) func(latencySample) float64 {
		return func(s latencySample) float64 { return float64(f(s)) / float64(time.Millisecond) }
	}
	withRange := func(sp spread, format string) string {
		v := fmt.Sprintf(format, sp.Median)
		if sp.Min != sp.Max {
			v += fmt.Sprintf(" ("+format+"–"+format+")", sp.Min, sp.Max)
		}
		return v
	}

	var b strings.Builder
	var rows, diag [][]string
	var ratios []string
	for _, sc := range scenarios {
		ss := byName[sc.Name]
		if len(ss) == 0 {
			continue
		}
		ratio, cleanRate, cleanTime := "–", "–", "–"
		if sc.Baseline != "" && len(byName[sc.Baseline]) > 0 {
			r := of(ss, func(s latencySample) float64 { return s.Ratio })
			ratio = withRange(r, "%.2f") + " × " + sc.Baseline
			perRun := make([]string, 0, len(ss))
			for _, s := range ss {
				perRun = append(perRun, fmt.Sprintf("%.2f", s.Ratio))
			}
			ratios = append(ratios, fmt.Sprintf("- p99 %s / p99 %s: **%.2f** (per run: %s)", sc.Name, sc.Baseline, r.Median,
				strings.Join(perRun, ", ")))
		}
		if ss[0].Batches > 0 {
			cleanRate = thousands(math.Round(of(ss, func(s latencySample) float64 { return float64(s.Removed) / s.RemoveTook.Seconds() }).Median))
			cleanTime = withRange(of(ss, func(s latencySample) float64 { return s.RemoveTook.Seconds() }), "%.1f s")
		}
		rows = append(rows, []string{sc.Name,
			thousands(of(ss, func(s latencySample) float64 { return float64(s.TableRows) }).Median),
			thousands(math.Round(of(ss, func(s latencySample) float64 { return float64(s.Claims) / s.Elapsed.Seconds() }).Median)),
			withRange(of(ss, msOf(func(s latencySample) time.Duration { return s.P50 })), "%.2f") + " ms",
			withRange(of(ss, msOf(func(s latencySample) time.Duration { return s.P99 })), "%.2f") + " ms",
			withRange(of(ss, msOf(func(s latencySample) time.Duration { return s.Max })), "%.1f") + " ms",
			ratio, cleanRate, cleanTime})

		var claims, clean = map[string]int{}, map[string]int{}
		ticks, vacuum, autovac, checkpoints := 0, 0, int64(0), int64(0)
		for _, s := range ss {
			for k, v := range s.ClaimStates {
				claims[k] += v
			}
			for k, v := range s.CleanStates {
				clean[k] += v
			}
			ticks, vacuum, autovac, checkpoints = ticks+s.Ticks, vacuum+s.VacuumTicks, autovac+s.Autovacuums, checkpoints+s.Checkpoints
		}
		vac := "none"
		if vacuum > 0 || autovac > 0 {
			vac = fmt.Sprintf("%d%% of samples, %d ended", percentOf(vacuum, ticks), autovac)
		}
		cpu := "–"
		if busy := of(ss, func(s latencySample) float64 { return s.CPUBusy }); busy.Min >= 0 {
			cpu = fmt.Sprintf("%.0f%%", busy.Median*100)
		}
		locked, claimSamples, locks := 0, 0, []string{}
		for k, v := range claims {
			claimSamples += v
			if strings.HasPrefix(k, "Lock:") {
				locked += v
				locks = append(locks, fmt.Sprintf("%s %d", k, v))
			}
		}
		onLock := fmt.Sprintf("%s of %s", thousands(float64(locked)), thousands(float64(claimSamples)))
		if len(locks) > 0 {
			slices.Sort(locks)
			onLock += " (" + strings.Join(locks, ", ") + ")"
		}
		diag = append(diag, []string{sc.Name, topStates(claims), onLock, cmp.Or(topStates(clean), "–"), vac,
			fmt.Sprintf("%.0f MB", of(ss, func(s latencySample) float64 { return float64(s.WALBytes) / 1e6 }).Median),
			fmt.Sprint(checkpoints), cpu})
	}

	runs := c.Runs
	fmt.Fprintf(&b, "Claim latency beside the inbox's cleanup: median of %d run(s), (min–max) where they differ. %d claimers, "+
		"each claim one message through the middleware (a fresh event ID, one UPDATE in the claim's transaction, commit); "+
		"cleanup batches of %s rows%s.\n\n", runs, c.Claimers, thousands(float64(c.Batch)), pauseNote(c.Pause))
	b.WriteString(markdownTable([]string{"Scenario", "Rows in table", "Claims/s", "p50", "p99", "max", "p99 vs baseline",
		"Cleanup rows/s", "Cleanup time"}, rows))
	if len(ratios) > 0 {
		b.WriteString("\n" + strings.Join(ratios, "\n") + "\n")
	}
	b.WriteString("\nWhile the claims ran: what their backends were doing, by share of samples taken every " +
		latencySampleEvery.String() + " (CPU: running with no wait event; client: idle in transaction, waiting for the " +
		"claimer's next statement; states under 1% left out), how many of those samples caught a claim waiting on a " +
		"lock, the same states for the cleanup's backend, autovacuum on the table, the WAL the whole server wrote " +
		"(median per run), checkpoints started (all runs) and the machine's CPU busy time.\n\n")
	b.WriteString(markdownTable([]string{"Scenario", "Claim backends", "Claims on a lock", "Cleanup backend", "Autovacuum on the table",
		"WAL written", "Checkpoints", "Machine CPU busy"}, diag))
	return b.String()
}

// pauseNote says how long the cleanup paused after each batch, when it did.
func pauseNote(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return ", a pause of " + d.String() + " after each"
}

// topStates lists the states of a count that make 1% of it or more, commonest first: "CPU 61%, IO:WALSync 22%, ...".
func topStates(m map[string]int) string {
	total := 0
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range m {
		total += v
		all = append(all, kv{k, v})
	}
	slices.SortFunc(all, func(a, b kv) int { return cmp.Or(b.v-a.v, strings.Compare(a.k, b.k)) })
	var out []string
	for _, e := range all {
		if p := percentOf(e.v, total); p >= 1 {
			out = append(out, fmt.Sprintf("%s %d%%", e.k, p))
		}
	}
	return strings.Join(out, ", ")
}

func percentOf(n, total int) int {
	if total == 0 {
		return 0
	}
	return (100*n + total/2) / total
}
