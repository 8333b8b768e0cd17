package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// spread is the median and the range of one measure over runs.
type spread struct{ Median, Min, Max float64 }

func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{Median: m, Min: s[0], Max: s[len(s)-1]}
}

// count formats a spread of counts the way the article does: "3,648 (2,777–4,525)".
func (s spread) count() string {
	return fmt.Sprintf("%s (%s–%s)", thousands(s.Median), thousands(s.Min), thousands(s.Max))
}

// thousands formats x with comma separators, and one decimal when it is not whole (a median of an even count).
func thousands(x float64) string {
	neg := x < 0
	x = math.Abs(x)
	whole := math.Floor(x)
	frac := ""
	if x-whole >= 0.05 {
		frac = fmt.Sprintf("%.1f", x-whole)[1:]
	}
	digits := fmt.Sprintf("%.0f", whole)
	var b strings.Builder
	for i, d := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	if neg {
		return "-" + b.String() + frac
	}
	return b.String() + frac
}

// markdownTable renders a header and rows as a GitHub markdown table.
func markdownTable(header []string, rows [][]string) string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(header, " | ") + " |\n|")
	for range header {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

// The article's kill table (its medians and ranges over 5 runs of 20 kills), beside the variant of ours that
// fails the same way: see docs/results/faults.md for why each pair is matched.
type articleKill struct {
	label           string
	dup, lost       spread
	throughputMsgPS float64
}

var articleKillRows = map[variant]articleKill{
	atMostOnce:   {"a2: auto-commit, 100-message batches", spread{2881, 1823, 3622}, spread{63, 48, 147}, 447.5},
	afterDB:      {"a1: auto-commit, one message per poll", spread{3648, 2777, 4525}, spread{0, 0, 0}, 445.1},
	afterDBSync:  {"b: commit after the database", spread{5, 0, 7}, spread{0, 0, 0}, 347.8},
	inboxVariant: {"c: inbox, commit after the database", spread{0, 0, 0}, spread{0, 0, 0}, 323},
}

const (
	colorDup     = "#c0392b"
	colorLost    = "#2c3e50"
	colorInbox   = "#27ae60"
	colorNeutral = "#7f8c8d"
)

func killReport(c killConfig, res []killResult) (string, string) {
	var rows [][]string
	chart := barChart{
		Title:    "Hard kills: duplicate and lost credits per run",
		Subtitle: fmt.Sprintf("median per run of up to %d SIGKILLs, %s events, %d runs; whiskers: min–max", c.Kills, thousands(float64(c.Events)), c.Runs),
		YLabel:   "credits per run (log scale)",
		Log:      true,
	}
	dup := series{Name: "duplicates (ours)", Color: colorDup}
	lost := series{Name: "lost (ours)", Color: colorLost}
	aDup := series{Name: "duplicates (article)", Color: colorDup, Hollow: true}
	aLost := series{Name: "lost (article)", Color: colorLost, Hollow: true}
	for _, v := range c.Variants {
		var kills, dups, losses, skips []float64
		for _, r := range res {
			if r.Variant == v {
				kills = append(kills, float64(r.Kills))
				dups = append(dups, float64(r.Duplicates))
				losses = append(losses, float64(r.Losses))
				skips = append(skips, float64(r.Skipped))
			}
		}
		d, l := spreadOf(dups), spreadOf(losses)
		row := []string{"`" + string(v) + "`", spreadOf(kills).count(), d.count(), l.count(), spreadOf(skips).count()}
		a, matched := articleKillRows[v]
		if matched {
			row = append(row, a.label, a.dup.count(), a.lost.count())
			aDup.Values = append(aDup.Values, a.dup.Median)
			aLost.Values = append(aLost.Values, a.lost.Median)
		} else { // the article has no such variant (batch mode, managed partitions)
			row = append(row, "–", "–", "–")
			aDup.Values = append(aDup.Values, math.NaN())
			aLost.Values = append(aLost.Values, math.NaN())
		}
		rows = append(rows, row)
		chart.Categories = append(chart.Categories, string(v))
		dup.Values, dup.Lo, dup.Hi = append(dup.Values, d.Median), append(dup.Lo, d.Min), append(dup.Hi, d.Max)
		lost.Values, lost.Lo, lost.Hi = append(lost.Values, l.Median), append(lost.Lo, l.Min), append(lost.Hi, l.Max)
	}
	chart.Series = []series{dup, lost, aDup, aLost}
	table := markdownTable([]string{"Variant", "Kills landed", "Duplicate credits", "Lost events", "Inbox skips",
		"Article's variant", "Article: duplicates", "Article: lost"}, rows)
	table += fmt.Sprintf("\nMedian (min–max) per run over %d runs of %s events, %d SIGKILLs scheduled per run, each after %s–%s of work.\n",
		c.Runs, thousands(float64(c.Events)), c.Kills, c.MinWork, c.MaxWork)
	return table, chart.svg()
}

// The article's zombie figures: five runs, 50 evictions; without the inbox every one became a duplicate credit,
// with it none did and each was logged as a skipped duplicate.
var articleZombie = map[bool]struct{ evictions, duplicates, skipped int }{
	false: {50, 50, 0},
	true:  {50, 0, 50},
}

func zombieReport(c zombieConfig, e *env, res []zombieResult) (string, string) {
	chart := barChart{
		Title: "Zombie consumers: evictions and what the zombies wrote",
		Subtitle: fmt.Sprintf("totals over %d runs of %s events, 1 in %d stalling for %s (rebalance timeout %s)",
			c.Runs, thousands(float64(c.Events)), c.StallEvery, c.StallFor, e.rebalance),
		YLabel: "over all runs",
	}
	ev := series{Name: "stalled members evicted", Color: colorNeutral}
	zw := series{Name: "zombie writes", Color: colorLost}
	zd := series{Name: "duplicate credits (ours)", Color: colorDup}
	ad := series{Name: "duplicate credits (article)", Color: colorDup, Hollow: true}
	var rows [][]string
	for _, v := range c.Variants {
		var t zombieResult
		var perRun []float64
		for _, r := range res {
			if r.Variant != v {
				continue
			}
			t.Stalls += r.Stalls
			t.StallsEvicted += r.StallsEvicted
			t.Evictions += r.Evictions
			t.ZombieWrites += r.ZombieWrites
			t.TakenOver += r.TakenOver
			t.ZombieDups += r.ZombieDups
			t.Duplicates += r.Duplicates
			t.Losses += r.Losses
			t.SkippedStalled += r.SkippedStalled
			t.UnevictedStalls += r.UnevictedStalls
			t.Rebalances += r.Rebalances
			perRun = append(perRun, float64(r.ZombieDups))
		}
		a := articleZombie[v == inboxVariant]
		rows = append(rows, []string{"`" + string(v) + "`", fmt.Sprint(t.Stalls), fmt.Sprint(t.StallsEvicted), fmt.Sprint(t.Evictions),
			fmt.Sprint(t.ZombieWrites), fmt.Sprint(t.TakenOver), fmt.Sprint(t.ZombieDups), spreadOf(perRun).count(),
			fmt.Sprint(t.SkippedStalled), fmt.Sprint(t.Duplicates), fmt.Sprint(t.Losses),
			fmt.Sprintf("%d evictions, %d duplicates, %d skipped", a.evictions, a.duplicates, a.skipped)})
		chart.Categories = append(chart.Categories, string(v))
		ev.Values = append(ev.Values, float64(t.StallsEvicted))
		zw.Values = append(zw.Values, float64(t.ZombieWrites))
		zd.Values = append(zd.Values, float64(t.ZombieDups))
		ad.Values = append(ad.Values, float64(a.duplicates))
	}
	chart.Series = []series{ev, zw, zd, ad}
	table := markdownTable([]string{"Variant", "Stalls", "Stalled members evicted", "Members evicted", "Zombie writes", "Also received by another consumer",
		"Duplicate credits of stalled messages", "per run", "Skipped by the inbox", "All duplicate credits",
		"Lost", "Article (5 runs)"}, rows)
	table += fmt.Sprintf("\nTotals over %d runs; \"per run\" is the median (min–max). %d consumers, %s events per run, "+
		"one in %d stalling for %s the first time it is handled; rebalance timeout %s, session timeout %s. "+
		"\"All duplicate credits\" includes messages replayed because a rebalance ended a session between a commit and its offset commit.\n",
		c.Runs, c.Consumers, thousands(float64(c.Events)), c.StallEvery, c.StallFor, e.rebalance, e.session)
	return table, chart.svg()
}

func dbFaultsReport(c dbFaultsConfig, res []dbFaultsResult) (string, string) {
	var rows [][]string
	for _, v := range c.Variants {
		var terms, downs, recs, nacks, skips, dups, losses []float64
		restarts, same, runs := 0, 0, 0
		for _, r := range res {
			if r.Variant != v {
				continue
			}
			runs++
			terms = append(terms, float64(r.Terminated))
			downs = append(downs, r.Downtime.Seconds())
			for _, d := range r.Recoveries {
				recs = append(recs, d.Seconds())
			}
			nacks = append(nacks, float64(r.Nacks))
			skips = append(skips, float64(r.Skipped))
			dups = append(dups, float64(r.Duplicates))
			losses = append(losses, float64(r.Losses))
			restarts += r.Restarts
			if r.SameProcess {
				same++
			}
		}
		sum := func(xs []float64) float64 {
			t := 0.0
			for _, x := range xs {
				t += x
			}
			return t
		}
		rec := spreadOf(recs)
		rows = append(rows, []string{"`" + string(v) + "`", fmt.Sprint(runs), spreadOf(terms).count(), fmt.Sprint(restarts),
			fmt.Sprintf("%.1f s", sum(downs)), fmt.Sprintf("%.2f s (%.2f–%.2f)", rec.Median, rec.Min, rec.Max),
			spreadOf(nacks).count(), spreadOf(skips).count(), thousands(sum(dups)), thousands(sum(losses)),
			fmt.Sprintf("%d of %d", same, runs)})
	}
	table := markdownTable([]string{"Variant", "Runs", "Backends terminated per run", "Restarts", "PostgreSQL down (total)",
		"Back to work after a restart", "Failed handlings per run", "Inbox skips per run", "Duplicate credits (total)",
		"Lost events (total)", "Same process throughout, clean exit"}, rows)
	table += fmt.Sprintf("\nPer run: median (min–max) over %d runs of %s events, 10 ms handlers. Backends in a transaction terminated about every %s; "+
		"%d restarts per run, spread evenly over the events. \"Back to work\" runs from PostgreSQL accepting connections again to the consumer's next credit.\n",
		c.Runs, thousands(float64(c.Events)), c.TerminateEvery, c.Restarts)
	// The chart is the first run as it happened: one consumer process through every fault, never restarted.
	var tl timeline
	if len(res) > 0 {
		r := res[0]
		tl = timeline{
			Title: fmt.Sprintf("One consumer through a misbehaving database: %s, run 1", r.Variant),
			Subtitle: fmt.Sprintf("%s events; %d backends terminated, %d restarts; %d duplicates, %d lost",
				thousands(float64(c.Events)), r.Terminated, r.Restarts, r.Duplicates, r.Losses),
			Points: r.Progress, Bands: r.Outages, Marks: r.Terminations,
		}
	}
	return table, tl.svg()
}

// throughputRatios are the ratios of medians the throughput tables give, numerator first, where both were
// measured: what the inbox costs, what batch mode buys back, and how close each comes to the ceiling.
var throughputRatios = [][2]string{
	{string(inboxVariant), string(afterDB)},
	{string(atCommitVariant), string(afterDB)},
	{string(batchVariant), string(inboxVariant)},
	{string(batchPgxVariant), string(batchVariant)},
	{string(inboxVariant), ceilingName},
	{string(batchVariant), ceilingName},
	{string(batchPgxVariant), ceilingName},
}

var throughputColors = map[string]string{
	ceilingName: "#2980b9", string(afterDB): colorNeutral, string(afterDBSync): "#8e44ad", string(inboxVariant): colorInbox,
	string(batchVariant): "#e67e22", string(batchPgxVariant): "#d35400", string(atCommitVariant): "#16a085",
}

// throughputReport renders one table per transport and handler sleep, a row per number of messages in flight,
// and a chart of the same: medians over the rounds, with their ranges, and ratios of medians.
func throughputReport(c throughputConfig, res []throughputResult) (string, string) {
	type key struct {
		kind     transportKind
		name     string
		inFlight int
		sleep    time.Duration
	}
	rates := map[key][]float64{}
	nacks, deadlocks, msgs, commits := map[key]int{}, map[key]int{}, map[key]int{}, map[key]int{}
	for _, r := range res {
		k := key{r.Transport, r.Name, r.InFlight, r.Sleep}
		rates[k] = append(rates[k], r.MsgPerS)
		nacks[k] += r.Nacks
		deadlocks[k] += r.Deadlocks
		msgs[k] += r.Messages
		commits[k] += r.Commits
	}
	batched := slices.ContainsFunc(c.Variants, variant.batched)
	// The ceiling has no transport; it stands beside every transport's consumers.
	get := func(kind transportKind, name string, inFlight int, sleep time.Duration) (spread, bool) {
		if name == ceilingName {
			kind = ""
		}
		xs, ok := rates[key{kind, name, inFlight, sleep}]
		return spreadOf(xs), ok
	}
	names := []string{}
	if c.Ceiling {
		names = append(names, ceilingName)
	}
	for _, v := range c.Variants {
		names = append(names, string(v))
	}

	var b strings.Builder
	var charts []barChart
	for _, kind := range c.Transports {
		for _, sleep := range c.Sleeps {
			fmt.Fprintf(&b, "**%s, %s handlers**\n\n", kind, sleepLabel(sleep))
			header := []string{"In flight"}
			for _, name := range names {
				header = append(header, "`"+name+"` msg/s")
			}
			var ratios [][2]string
			for _, q := range throughputRatios {
				if slices.Contains(names, q[0]) && slices.Contains(names, q[1]) {
					ratios = append(ratios, q)
					header = append(header, q[0]+" ÷ "+q[1])
				}
			}
			if batched {
				header = append(header, "Messages per commit")
			}
			header = append(header, "Failed handlings (deadlocks)")
			chart := barChart{
				Title:    fmt.Sprintf("%s, %s handlers", kind, sleepLabel(sleep)),
				Subtitle: fmt.Sprintf("median msg/s of %d rounds; whiskers: min–max", c.Runs),
				YLabel:   "messages per second",
			}
			ser := make([]series, len(names))
			for i, name := range names {
				ser[i] = series{Name: name, Color: throughputColors[name]}
			}
			var rows [][]string
			for _, f := range c.InFlight {
				row := []string{fmt.Sprint(f)}
				chart.Categories = append(chart.Categories, fmt.Sprintf("%d in flight", f))
				for i, name := range names {
					m, ok := get(kind, name, f, sleep)
					if !ok {
						row = append(row, "–")
						ser[i].Values, ser[i].Lo, ser[i].Hi = append(ser[i].Values, math.NaN()), append(ser[i].Lo, 0), append(ser[i].Hi, 0)
						continue
					}
					row = append(row, fmt.Sprintf("%.0f (%.0f–%.0f)", m.Median, m.Min, m.Max))
					ser[i].Values, ser[i].Lo, ser[i].Hi = append(ser[i].Values, m.Median), append(ser[i].Lo, m.Min), append(ser[i].Hi, m.Max)
				}
				for _, q := range ratios {
					num, ok1 := get(kind, q[0], f, sleep)
					den, ok2 := get(kind, q[1], f, sleep)
					if !ok1 || !ok2 || den.Median == 0 {
						row = append(row, "–")
						continue
					}
					row = append(row, fmt.Sprintf("%.2f", num.Median/den.Median))
				}
				if batched {
					var per []string
					for _, v := range c.Variants {
						if k := (key{kind, string(v), f, sleep}); v.batched() && commits[k] > 0 {
							per = append(per, fmt.Sprintf("%s %.1f", v, float64(msgs[k])/float64(commits[k])))
						}
					}
					row = append(row, cmp.Or(strings.Join(per, ", "), "–"))
				}
				var failed []string
				for _, v := range c.Variants {
					k := key{kind, string(v), f, sleep}
					if nacks[k] > 0 {
						failed = append(failed, fmt.Sprintf("%s %d (%d)", v, nacks[k], deadlocks[k]))
					}
				}
				if len(failed) == 0 {
					failed = []string{"0"}
				}
				row = append(row, strings.Join(failed, ", "))
				rows = append(rows, row)
			}
			chart.Series = ser
			charts = append(charts, chart)
			b.WriteString(markdownTable(header, rows))
			b.WriteString("\n")
		}
	}
	batch := ""
	if batched {
		batch = fmt.Sprintf(" Batch mode: WithBatch(%s, %d), WithBatchConcurrency(%d); messages per commit is the mean over the rounds, "+
			"from the inbox rows' transaction IDs (a batch claims its messages in one statement).", c.Batch.Wait, c.Batch.Size, c.Batch.Concurrency)
	}
	pool := "one database connection per message in flight"
	if c.Pool > 0 {
		pool = fmt.Sprintf("%d database connections", c.Pool)
	}
	ceiling := ""
	if c.Ceiling {
		ceiling = ", and the ceiling,"
	}
	fmt.Fprintf(&b, "Median (min–max) of %d rounds; each measurement handles %d messages per message in flight, at most %s, "+
		"credited over %s accounts. Every transport and variant%s measured in every round, in an order that moves "+
		"from round to round. The rate runs from a consumer's first message to its last credit. Each consumer%s "+
		"has %s, opened before the first message.%s Ratios are of medians. Failed handlings are summed over the rounds, "+
		"per variant; each was redelivered and applied.\n",
		c.Runs, c.PerSlot, thousands(float64(c.Messages)), thousands(float64(c.Accounts)), ceiling, ceiling, pool, batch)
	return b.String(), chartGrid(charts, len(c.Sleeps))
}

// replaceMarked returns doc with section in place of the text from the begin marker to the end of the end marker's
// line; a doc without the markers gets section at its end.
func replaceMarked(doc, begin, end, section string) string {
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		return strings.TrimRight(doc, "\n") + "\n\n" + section
	}
	return doc[:i] + section + strings.TrimPrefix(doc[j+len(end):], "\n")
}
