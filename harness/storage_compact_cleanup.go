package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// compactRetention is the retention window of the cleanup experiments: inbox.DefaultRetention, 14 days, over which
// the tables' rows are spread.
const compactRetention = 14 * 24 * time.Hour

// compactShape is one way of finding a batch of expired rows through the BRIN index. Each is one statement: it
// picks at most $2 rows with processed_at < $1 (never a 'processing' row), deletes them by ctid (a TID scan, no
// second lookup), and returns how many it picked and deleted, the greatest ctid it picked, and the BRIN ranges
// ($3 pages each) the deleted rows were in.
type compactShape struct {
	Name, Doc string
	SQL       string
}

var compactShapes = []compactShape{
	{
		Name: "brin restart",
		Doc: "each batch runs the BRIN index's bitmap scan from the first matching range: pages whose rows earlier " +
			"batches deleted are read again, cheaply once the first visit pruned them",
		SQL: `WITH picked AS (
				SELECT ctid FROM {table} WHERE processed_at < $1 AND state <> 'p' LIMIT $2
			), deleted AS (
				DELETE FROM {table} WHERE ctid = ANY (ARRAY(SELECT ctid FROM picked)) AND processed_at < $1 AND state <> 'p'
				RETURNING ctid
			)
			SELECT (SELECT count(*) FROM picked), (SELECT count(*) FROM deleted), (SELECT max(ctid) FROM picked),
				(SELECT array_agg(DISTINCT (ctid::text::point)[0]::bigint / $3) FROM deleted)`,
	},
	{
		Name: "brin after ctid",
		Doc: "as brin restart, picking only rows after the greatest ctid of the previous batch; the bitmap heap " +
			"scan still fetches every page before it, the ctid condition being a filter and not a bound on the " +
			"pages read; a last restart batch finds any row the order of the scan skipped",
		SQL: `WITH picked AS (
				SELECT ctid FROM {table} WHERE processed_at < $1 AND state <> 'p' AND ctid > $4::tid LIMIT $2
			), deleted AS (
				DELETE FROM {table} WHERE ctid = ANY (ARRAY(SELECT ctid FROM picked)) AND processed_at < $1 AND state <> 'p'
				RETURNING ctid
			)
			SELECT (SELECT count(*) FROM picked), (SELECT count(*) FROM deleted), (SELECT max(ctid) FROM picked),
				(SELECT array_agg(DISTINCT (ctid::text::point)[0]::bigint / $3) FROM deleted)`,
	},
	{
		Name: "brin span walk",
		Doc: "one scan through the BRIN index finds the first and the last page holding expired rows; the batches " +
			"then walk that span with TID range scans of about a batch of rows each, so each page is read once",
		SQL: `WITH picked AS (
				SELECT ctid FROM {table} WHERE ctid >= $4::tid AND ctid < $5::tid AND processed_at < $1 AND state <> 'p' LIMIT $2
			), deleted AS (
				DELETE FROM {table} WHERE ctid = ANY (ARRAY(SELECT ctid FROM picked)) AND processed_at < $1 AND state <> 'p'
				RETURNING ctid
			)
			SELECT (SELECT count(*) FROM picked), (SELECT count(*) FROM deleted), (SELECT max(ctid) FROM picked),
				(SELECT array_agg(DISTINCT (ctid::text::point)[0]::bigint / $3) FROM deleted)`,
	},
	{
		Name: "tid range walk",
		Doc: "no index at all: TID range scans of consecutive windows of about a batch of rows each, over the " +
			"whole table, as a baseline",
		SQL: `WITH picked AS (
				SELECT ctid FROM {table} WHERE ctid >= $4::tid AND ctid < $5::tid AND processed_at < $1 AND state <> 'p' LIMIT $2
			), deleted AS (
				DELETE FROM {table} WHERE ctid = ANY (ARRAY(SELECT ctid FROM picked)) AND processed_at < $1 AND state <> 'p'
				RETURNING ctid
			)
			SELECT (SELECT count(*) FROM picked), (SELECT count(*) FROM deleted), (SELECT max(ctid) FROM picked),
				(SELECT array_agg(DISTINCT (ctid::text::point)[0]::bigint / $3) FROM deleted)`,
	},
}

// compactRound is what one cleanup round did.
type compactRound struct {
	Deleted, Batches int64
	Took             time.Duration
	// First and Last are the times of the first and the last batch that deleted rows; a batch that rereads what
	// earlier batches deleted gets slower as the round goes on.
	First, Last time.Duration
	// Ranges are the BRIN ranges the round deleted rows in, by number (first page / pages_per_range).
	Ranges []int64
}

// compactCleanup deletes table's rows whose processed_at lies before cutoff in batches of batch, by shape, each
// batch in its own transaction after extending a lock row as the library's cleanup does. minutes says that
// processed_at counts minutes since 1970: the cutoff is then the minute it falls in, so a row is never deleted
// before its time. The round first records the cutoff in the consumers table, which is what answers "how far back
// does each consumer remember", and returns the BRIN ranges (ppr pages each) it deleted in.
func compactCleanup(ctx context.Context, db *sql.DB, table string, minutes bool, shape compactShape, cutoff time.Time, batch, ppr int) (compactRound, error) {
	var r compactRound
	start := time.Now()
	var arg any = cutoff
	if minutes {
		m := compactMinutes(cutoff)
		arg, cutoff = m, time.Unix(m*60, 0)
	}
	holder := uuid.NewString()
	locks := pq.QuoteIdentifier(table + "_locks")
	if _, err := db.ExecContext(ctx, `INSERT INTO `+locks+` (name, holder, held_until) VALUES ('cleanup', $1, now() + interval '5 minutes')`, holder); err != nil {
		return r, fmt.Errorf("lock: %w", err)
	}
	defer func() { _, _ = db.Exec(`DELETE FROM `+locks+` WHERE name = 'cleanup' AND holder = $1`, holder) }()
	// The cutoff is recorded before any row goes: from then on, how far back a consumer remembers is answered as
	// no earlier than the cutoff, which is true once the round is done and errs on the short side while it runs
	// or if it fails.
	if _, err := db.ExecContext(ctx, `UPDATE `+pq.QuoteIdentifier(table+"_consumers")+
		` SET cleaned_before = $1 WHERE cleaned_before IS NULL OR cleaned_before < $1`, cutoff); err != nil {
		return r, fmt.Errorf("record cutoff: %w", err)
	}
	ranges := map[int64]bool{}
	if err := compactBatches(ctx, db, table, locks, holder, shape, arg, batch, ppr, &r, ranges); err != nil {
		return r, err
	}
	if shape.Name == "brin after ctid" || shape.Name == "brin span walk" {
		// These shapes trust a batch's scan to return rows in ctid order, as a bitmap heap scan or a TID range
		// scan in one process does; a parallel or a synchronized sequential scan would not. One batch of the
		// restart shape finds whatever that left behind, and costs one pass over the matching ranges.
		if err := compactBatches(ctx, db, table, locks, holder, compactShapes[0], arg, batch, ppr, &r, ranges); err != nil {
			return r, err
		}
	}
	for t := range ranges {
		r.Ranges = append(r.Ranges, t)
	}
	slices.Sort(r.Ranges)
	r.Took = time.Since(start)
	return r, nil
}

// compactBatches runs shape's batches until one picks less than a full batch (the walk: until it passed the last
// page), adding to r and ranges.
func compactBatches(ctx context.Context, db *sql.DB, table, locks, holder string, shape compactShape, cutoff any, batch, ppr int,
	r *compactRound, ranges map[int64]bool) error {
	query := strings.ReplaceAll(shape.SQL, "{table}", pq.QuoteIdentifier(table))
	walking := shape.Name == "tid range walk" || shape.Name == "brin span walk"
	from := "(0,0)" // the least ctid the next batch may pick
	var window, end, pages int64
	if walking {
		// Windows of about batch rows each, from the table's pages and its rows as VACUUM ANALYZE counted them.
		var rows float64
		if err := db.QueryRowContext(ctx, `SELECT pg_relation_size($1::text::regclass) / current_setting('block_size')::bigint, reltuples
			FROM pg_class WHERE oid = $1::text::regclass`, table).Scan(&pages, &rows); err != nil {
			return err
		}
		window = max(1, int64(float64(batch)*float64(pages)/max(rows, 1)))
		first := int64(0)
		if shape.Name == "brin span walk" {
			// The span of pages with expired rows, in one pass over the ranges the BRIN index matches.
			var lo, hi sql.NullString
			if err := db.QueryRowContext(ctx, `SELECT min(ctid), max(ctid) FROM `+pq.QuoteIdentifier(table)+
				` WHERE processed_at < $1 AND state <> 'p'`, cutoff).Scan(&lo, &hi); err != nil {
				return fmt.Errorf("span: %w", err)
			}
			if !lo.Valid {
				return nil
			}
			var item int64
			fmt.Sscanf(lo.String, "(%d,%d)", &first, &item)
			fmt.Sscanf(hi.String, "(%d,%d)", &pages, &item)
			pages++
			from = fmt.Sprintf("(%d,0)", first)
		}
		end = first + window
	}
	for {
		bstart := time.Now()
		var picked, deleted int64
		var last sql.NullString
		var touched []int64
		err := compactInTx(ctx, db, func(tx *sql.Tx) error {
			var one int
			if err := tx.QueryRowContext(ctx, `UPDATE `+locks+` SET held_until = now() + interval '5 minutes'
				WHERE name = 'cleanup' AND holder = $1 RETURNING 1`, holder).Scan(&one); err != nil {
				return fmt.Errorf("extend lock: %w", err)
			}
			args := []any{cutoff, batch, ppr}
			switch {
			case walking:
				args = append(args, from, fmt.Sprintf("(%d,0)", end))
			case shape.Name == "brin after ctid":
				args = append(args, from)
			}
			return tx.QueryRowContext(ctx, query, args...).Scan(&picked, &deleted, &last, pq.Array(&touched))
		})
		if err != nil {
			return fmt.Errorf("batch %d: %w", r.Batches+1, err)
		}
		r.Batches++
		r.Deleted += deleted
		for _, t := range touched {
			ranges[t] = true
		}
		if took := time.Since(bstart); deleted > 0 {
			if r.First == 0 {
				r.First = took
			}
			r.Last = took
		}
		if picked == int64(batch) && last.Valid {
			// More may follow, in this window or in the bitmap. The walk's window starts at from, inclusive; the
			// other shape keeps the rows after from.
			from = last.String
			if walking {
				from = compactNextTID(last.String)
			}
			continue
		}
		if !walking || end >= pages {
			return nil
		}
		// The walk moves on by whole windows, whether the window held expired rows or not, and ends past the last
		// page.
		from = fmt.Sprintf("(%d,0)", end)
		end += window
	}
}

// compactNextTID is the tid right after t, "(page,item)": a walk's window starts again there.
func compactNextTID(t string) string {
	var page, item int64
	fmt.Sscanf(t, "(%d,%d)", &page, &item)
	return fmt.Sprintf("(%d,%d)", page, item+1)
}

// compactResummarize rebuilds the summaries of the given BRIN ranges from the rows they hold now. A summary only
// ever widens: an insert into a summarized range stretches it to the new value, and neither a DELETE nor VACUUM
// narrows it again, so a range whose old rows were deleted and whose pages took new rows would match every later
// cutoff. Desummarizing forgets the old summary; summarizing (at once with summarize, else by the next VACUUM)
// reads the range's live rows (rows deleted by a transaction that some snapshot may still see count as live).
// Both take a SHARE UPDATE EXCLUSIVE lock on the table, which conflicts with VACUUM and with each other but not
// with INSERT or DELETE.
func compactResummarize(ctx context.Context, db *sql.DB, table string, ppr int, ranges []int64, summarize bool) error {
	index := table + "_processed_at"
	first := make([]int64, len(ranges))
	for i, r := range ranges {
		first[i] = r * int64(ppr)
	}
	if _, err := db.ExecContext(ctx, `SELECT brin_desummarize_range($1::text::regclass, b) FROM unnest($2::bigint[]) b`,
		pq.QuoteIdentifier(index), pq.Array(first)); err != nil {
		return fmt.Errorf("desummarize: %w", err)
	}
	if !summarize {
		return nil
	}
	if _, err := db.ExecContext(ctx, `SELECT brin_summarize_range($1::text::regclass, b) FROM unnest($2::bigint[]) b`,
		pq.QuoteIdentifier(index), pq.Array(first)); err != nil {
		return fmt.Errorf("summarize: %w", err)
	}
	return nil
}

// compactInTx runs f in a transaction of its own, committed when f succeeds.
func compactInTx(ctx context.Context, db *sql.DB, f func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}

// compactRecommendedDDL is the recommended layout with the BRIN index at ppr pages per range.
func compactRecommendedDDL(ppr int) string {
	return compactCommonDDL + compactRowDDL(true, "message_id, consumer_id", 90) + compactBRINDDL(ppr)
}

// compactCreateRecommended creates the recommended layout, BRIN at ppr pages per range, with uuid IDs.
func compactCreateRecommended(ctx context.Context, db *sql.DB, table string, ppr int) (drop func(), err error) {
	dropSQL := compactFill(compactDropDDL, table, "uuid")
	drop = func() { _, _ = db.Exec(dropSQL) }
	_, err = db.ExecContext(ctx, compactFill(compactRecommendedDDL(ppr), table, "uuid"))
	return drop, err
}

// compactCleanupRun is one measured cleanup round of the cleanup part.
type compactCleanupRun struct {
	Method string
	Round  compactRound
	Left   int64 // expired rows left after the round: must be none
}

func compactCleanupPart(ctx context.Context, db *sql.DB, c compactConfig, progress func(string, ...any)) (string, error) {
	scenarios := []struct {
		Name string
		Keep time.Duration // rows younger than this stay
	}{{"one day of 14", compactRetention - 24*time.Hour}, {"half the table", compactRetention / 2}}
	methods := []string{"today: inbox.Cleanup, B-tree"}
	for _, s := range compactShapes {
		methods = append(methods, s.Name)
	}
	progress("cleanup: %d runs of %s rows over 14 days, batches of %d, methods %v", c.runs, thousands(float64(c.rows)), c.batch, methods)
	results := map[string][]compactCleanupRun{} // scenario + "/" + method -> one per run
	for run := 1; run <= c.runs; run++ {
		for _, sc := range scenarios {
			for _, m := range methods {
				res, err := compactCleanupOnce(ctx, db, c, m, sc.Keep)
				if err != nil {
					return "", fmt.Errorf("run %d, %s, %s: %w", run, sc.Name, m, err)
				}
				if res.Left != 0 {
					return "", fmt.Errorf("run %d, %s, %s: %d expired rows left after the cleanup", run, sc.Name, m, res.Left)
				}
				results[sc.Name+"/"+m] = append(results[sc.Name+"/"+m], res)
				progress("run %d/%d %-15s %-30s deleted %7d in %4d batches, %6.2f s (first batch %4d ms, last %4d ms)",
					run, c.runs, sc.Name, m, res.Round.Deleted, res.Round.Batches, res.Round.Took.Seconds(),
					res.Round.First.Milliseconds(), res.Round.Last.Milliseconds())
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Batched cleanup of %s rows spread over 14 days, uuid v7 keys, batches of %d rows, median of %d runs:\n\n",
		thousands(float64(c.rows)), c.batch, c.runs)
	var rows [][]string
	for _, sc := range scenarios {
		for _, m := range methods {
			rs := results[sc.Name+"/"+m]
			f := func(g func(compactCleanupRun) float64) float64 {
				xs := make([]float64, len(rs))
				for i, r := range rs {
					xs[i] = g(r)
				}
				return spreadOf(xs).Median
			}
			deleted := f(func(r compactCleanupRun) float64 { return float64(r.Round.Deleted) })
			took := f(func(r compactCleanupRun) float64 { return r.Round.Took.Seconds() })
			rows = append(rows, []string{sc.Name, m, thousands(deleted),
				thousands(f(func(r compactCleanupRun) float64 { return float64(r.Round.Batches) })),
				fmt.Sprintf("%.2f", took), thousands(math.Round(deleted / took)),
				fmt.Sprintf("%.0f", f(func(r compactCleanupRun) float64 { return float64(r.Round.First.Milliseconds()) })),
				fmt.Sprintf("%.0f", f(func(r compactCleanupRun) float64 { return float64(r.Round.Last.Milliseconds()) }))})
		}
	}
	b.WriteString(markdownTable([]string{"expired", "method", "deleted", "batches", "seconds", "rows/s", "first batch ms", "last batch ms"}, rows))
	b.WriteString("\nMethods:\n\n- today: inbox.Cleanup on the table of migrations 001 to 006, walking (consumer, processed_at)\n")
	for _, s := range compactShapes {
		fmt.Fprintf(&b, "- %s: %s (layout %s, BRIN pages_per_range 32)\n", s.Name, s.Doc, compactRecommended)
	}
	return b.String(), nil
}

// compactCleanupOnce fills a fresh table with c.rows rows spread over the retention window, ending now, and times
// one cleanup round that keeps the rows younger than keep.
func compactCleanupOnce(ctx context.Context, db *sql.DB, c compactConfig, method string, keep time.Duration) (compactCleanupRun, error) {
	res := compactCleanupRun{Method: method}
	table := fmt.Sprintf("harness_compact_cleanup_%d", os.Getpid())
	today := strings.HasPrefix(method, "today")
	layout := compactRecommended
	var drop func()
	var err error
	if today {
		layout = compactTodayName
		drop, err = compactCreate(ctx, db, compactTodayName, table, "uuid")
	} else {
		drop, err = compactCreateRecommended(ctx, db, table, 32)
	}
	defer drop()
	if err != nil {
		return res, err
	}
	now := time.Now()
	step := compactRetention / time.Duration(c.rows)
	if err := compactFillRows(ctx, db, layout, table, "uuid v7", compactRows{N: c.rows, Consumers: 1, Start: now.Add(-compactRetention), Step: step}); err != nil {
		return res, fmt.Errorf("fill: %w", err)
	}
	if _, err := db.ExecContext(ctx, `VACUUM ANALYZE `+pq.QuoteIdentifier(table)); err != nil {
		return res, err
	}
	if today {
		start := time.Now()
		last := start
		var first, lastBatch time.Duration
		r, err := inbox.Cleanup(ctx, db, inbox.CleanupParams{Retention: keep, BatchSize: c.batch,
			Progress: func(p inbox.CleanupProgress) {
				d := time.Since(last)
				last = time.Now()
				if first == 0 {
					first = d
				}
				lastBatch = d
			}}, inbox.WithTable(table))
		if err != nil {
			return res, err
		}
		res.Round = compactRound{Deleted: r.Deleted, Batches: int64(r.Batches), Took: time.Since(start), First: first, Last: lastBatch}
		err = db.QueryRowContext(ctx, `SELECT count(*) FROM `+pq.QuoteIdentifier(table)+` WHERE processed_at < $1`, r.Cutoff).Scan(&res.Left)
		return res, err
	}
	cutoff := time.Now().Add(-keep)
	shape := compactShapes[slices.IndexFunc(compactShapes, func(s compactShape) bool { return s.Name == method })]
	res.Round, err = compactCleanup(ctx, db, table, true, shape, cutoff, c.batch, 32)
	if err != nil {
		return res, err
	}
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM `+pq.QuoteIdentifier(table)+` WHERE processed_at < $1`, compactMinutes(cutoff)).Scan(&res.Left)
	return res, err
}

// compactDay is one simulated day of the reuse part.
type compactDay struct {
	Day int
	// Expired counts the rows that left the retention window; Holding the heap pages they are on; Read the heap
	// pages the BRIN index makes a scan for them read; Pages the table's pages.
	Expired, Holding, Read, Pages int64
	Round                         compactRound
	// Upkeep is how long the upkeep of the round's BRIN ranges took.
	Upkeep time.Duration
	// Horizon is false when another session still held a snapshot older than the round's deletes a minute after
	// it: the upkeep and VACUUM then saw those rows as live.
	Horizon bool
}

// compactUpkeep is what is done for the BRIN ranges a cleanup round deleted rows in.
type compactUpkeep string

const (
	// compactUpkeepNone leaves the summaries as they are.
	compactUpkeepNone compactUpkeep = "none"
	// compactUpkeepResummarize desummarizes and summarizes them again at once, after the round.
	compactUpkeepResummarize compactUpkeep = "re-summarize after the round"
	// compactUpkeepDesummarize only desummarizes them after the round; the next VACUUM summarizes every range
	// left without a summary, once it has removed the deleted rows.
	compactUpkeepDesummarize compactUpkeep = "desummarize, VACUUM summarizes"
)

func compactReusePart(ctx context.Context, db *sql.DB, c compactConfig, progress func(string, ...any)) (string, error) {
	pprs := []int{8, 32, 128}
	upkeeps := []compactUpkeep{compactUpkeepNone, compactUpkeepResummarize, compactUpkeepDesummarize}
	progress("reuse: %d days on %s rows (%s a day), pages_per_range %v, upkeep %q",
		c.days, thousands(float64(c.rows)), thousands(float64(c.rows/14)), pprs, upkeeps)
	type variant struct {
		ppr    int
		upkeep compactUpkeep
	}
	var variants []variant
	for _, p := range pprs {
		for _, u := range upkeeps {
			variants = append(variants, variant{p, u})
		}
	}
	all := map[variant][]compactDay{}
	for _, v := range variants {
		days, err := compactReuseOnce(ctx, db, c, v.ppr, v.upkeep, func(d compactDay) {
			progress("ppr %3d %-31s day %2d: expired %6d on %5d pages, BRIN reads %5d of %5d pages, cleanup %5d ms, upkeep %4d ms%s",
				v.ppr, v.upkeep, d.Day, d.Expired, d.Holding, d.Read, d.Pages, d.Round.Took.Milliseconds(), d.Upkeep.Milliseconds(),
				map[bool]string{false: " (an older snapshot was still held)", true: ""}[d.Horizon])
		})
		if err != nil {
			return "", fmt.Errorf("ppr %d, upkeep %s: %w", v.ppr, v.upkeep, err)
		}
		all[v] = days
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Heap pages a cleanup reads through the BRIN index / pages holding expired rows, day by day: %s rows, "+
		"14 days of retention, each day one day's rows (%s) deleted in batches of %d, the ranges' upkeep, VACUUM, and a "+
		"new day's rows copied in:\n\n", thousands(float64(c.rows)), thousands(float64(c.rows/14)), c.batch)
	header := []string{"pages_per_range", "upkeep after a round"}
	show := compactShownDays(c.days)
	for _, d := range show {
		header = append(header, fmt.Sprintf("day %d", d))
	}
	header = append(header, "table pages, last day", "cleanup ms, last day", "upkeep ms, last day")
	var rows [][]string
	for _, v := range variants {
		days := all[v]
		row := []string{fmt.Sprint(v.ppr), string(v.upkeep)}
		for _, d := range show {
			x := days[d-1]
			row = append(row, fmt.Sprintf("%s / %s", thousands(float64(x.Read)), thousands(float64(x.Holding))))
		}
		last := days[len(days)-1]
		row = append(row, thousands(float64(last.Pages)), fmt.Sprint(last.Round.Took.Milliseconds()), fmt.Sprint(last.Upkeep.Milliseconds()))
		rows = append(rows, row)
	}
	b.WriteString(markdownTable(header, rows))
	return b.String(), nil
}

// compactShownDays are the days the reuse table shows: the first, the middle of the window, the one after a whole
// window of reuse, and the last.
func compactShownDays(days int) []int {
	var out []int
	for _, d := range []int{1, 2, 8, 15, days} {
		if d <= days && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// compactReuseOnce runs c.days simulated days on a fresh recommended table with BRIN at ppr pages per range.
// Simulated time starts 14 + c.days days ago, so every processed_at lies in the past.
func compactReuseOnce(ctx context.Context, db *sql.DB, c compactConfig, ppr int, upkeep compactUpkeep, report func(compactDay)) ([]compactDay, error) {
	table := fmt.Sprintf("harness_compact_reuse_%d", os.Getpid())
	drop, err := compactCreateRecommended(ctx, db, table, ppr)
	defer drop()
	if err != nil {
		return nil, err
	}
	day := 24 * time.Hour
	perDay := c.rows / 14
	step := day / time.Duration(perDay)
	t0 := time.Now().Add(-compactRetention - time.Duration(c.days)*day).Truncate(time.Minute)
	if err := compactFillRows(ctx, db, compactRecommended, table, "uuid v7", compactRows{N: perDay * 14, Consumers: 1, Start: t0, Step: step}); err != nil {
		return nil, fmt.Errorf("fill: %w", err)
	}
	if _, err := db.ExecContext(ctx, `VACUUM ANALYZE `+pq.QuoteIdentifier(table)); err != nil {
		return nil, err
	}
	shape := compactShapes[0]
	var out []compactDay
	for d := 1; d <= c.days; d++ {
		cutoffAt := t0.Add(time.Duration(d) * day)
		cutoff := compactMinutes(cutoffAt)
		x := compactDay{Day: d}
		if err := db.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT (ctid::text::point)[0]),
				(SELECT relpages FROM pg_class WHERE oid = $2::text::regclass)
			FROM `+pq.QuoteIdentifier(table)+` WHERE processed_at < $1`, cutoff, table).Scan(&x.Expired, &x.Holding, &x.Pages); err != nil {
			return nil, err
		}
		if x.Read, err = compactBitmapPages(ctx, db, table, cutoff); err != nil {
			return nil, err
		}
		if x.Round, err = compactCleanup(ctx, db, table, true, shape, cutoffAt, c.batch, ppr); err != nil {
			return nil, fmt.Errorf("day %d: %w", d, err)
		}
		if x.Round.Deleted != x.Expired {
			return nil, fmt.Errorf("day %d: deleted %d of %d expired rows", d, x.Round.Deleted, x.Expired)
		}
		// Until no snapshot is older than the deletes, their rows count as live for a summary and cannot be
		// removed by VACUUM; other sessions of the database can hold it back for a while.
		if x.Horizon, err = compactWaitHorizon(ctx, db, time.Minute); err != nil {
			return nil, fmt.Errorf("day %d: %w", d, err)
		}
		if upkeep != compactUpkeepNone && len(x.Round.Ranges) > 0 {
			us := time.Now()
			if err := compactResummarize(ctx, db, table, ppr, x.Round.Ranges, upkeep == compactUpkeepResummarize); err != nil {
				return nil, fmt.Errorf("day %d: %w", d, err)
			}
			x.Upkeep = time.Since(us)
		}
		if _, err := db.ExecContext(ctx, `VACUUM `+pq.QuoteIdentifier(table)); err != nil {
			return nil, err
		}
		start := t0.Add(compactRetention + time.Duration(d-1)*day)
		if err := compactFillRows(ctx, db, compactRecommended, table, "uuid v7", compactRows{N: perDay, Consumers: 1, Start: start, Step: step}); err != nil {
			return nil, fmt.Errorf("day %d: fill: %w", d, err)
		}
		report(x)
		out = append(out, x)
	}
	return out, nil
}

// compactBitmapPages is how many heap pages a scan for processed_at < cutoff reads through the BRIN index: the
// lossy and exact heap blocks of a bitmap heap scan, which EXPLAIN ANALYZE reports. Sequential scans are turned
// off for the one statement, or the planner would read the whole table once most of it matches.
func compactBitmapPages(ctx context.Context, db *sql.DB, table string, cutoff int64) (int64, error) {
	var plan string
	err := compactInTx(ctx, db, func(tx *sql.Tx) error {
		// PostgreSQL 15 reports only the leader's heap blocks of a parallel bitmap heap scan, so the scan is kept
		// to one process.
		if _, err := tx.ExecContext(ctx, `SET LOCAL enable_seqscan = off; SET LOCAL max_parallel_workers_per_gather = 0`); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, fmt.Sprintf(`EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) SELECT count(*) FROM %s WHERE processed_at < %d`,
			pq.QuoteIdentifier(table), cutoff)).Scan(&plan)
	})
	if err != nil {
		return 0, err
	}
	return compactPlanHeapBlocks(plan)
}

// compactPlanHeapBlocks adds up the heap blocks of every bitmap heap scan in an EXPLAIN (ANALYZE, FORMAT JSON)
// plan.
func compactPlanHeapBlocks(plan string) (int64, error) {
	type node struct {
		NodeType string  `json:"Node Type"`
		Lossy    int64   `json:"Lossy Heap Blocks"`
		Exact    int64   `json:"Exact Heap Blocks"`
		Plans    []*node `json:"Plans"`
	}
	var top []struct {
		Plan *node `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(plan), &top); err != nil || len(top) == 0 || top[0].Plan == nil {
		return 0, fmt.Errorf("read plan: %v: %s", err, plan)
	}
	var sum int64
	found := false
	var walk func(n *node)
	walk = func(n *node) {
		if n.NodeType == "Bitmap Heap Scan" {
			found = true
			sum += n.Lossy + n.Exact
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(top[0].Plan)
	if !found {
		return 0, fmt.Errorf("plan has no bitmap heap scan: %s", plan)
	}
	return sum, nil
}

// compactClaimTable is one table of the claims part and how a claim is made on it.
type compactClaimTable struct {
	Name, Layout string
	// idKnown passes the consumer's id to the claim instead of its name.
	idKnown bool
	table   string
	claim   func(ctx context.Context, tx *sql.Tx, id string) error
}

func compactClaimsPart(ctx context.Context, c compactConfig, progress func(string, ...any)) (string, error) {
	u, err := url.Parse(c.dsn)
	if err != nil {
		return "", fmt.Errorf("--dsn: %w", err)
	}
	q := u.Query()
	q.Set("synchronous_commit", "off") // lib/pq passes parameters it does not know on to the server
	u.RawQuery = q.Encode()
	db, err := sql.Open("postgres", u.String())
	if err != nil {
		return "", err
	}
	defer db.Close()
	db.SetMaxOpenConns(c.workers + 2)
	db.SetMaxIdleConns(c.workers + 2)

	tables := []*compactClaimTable{
		{Name: "today", Layout: compactTodayName},
		{Name: "key-first, id looked up by name", Layout: "key-first"},
		{Name: compactRecommended + ", id looked up by name", Layout: compactRecommended},
		{Name: compactRecommended + ", id known", Layout: compactRecommended, idKnown: true},
	}
	for i, t := range tables {
		t.table = fmt.Sprintf("harness_compact_claims_%d_%d", i, os.Getpid())
		drop, err := compactCreate(ctx, db, t.Layout, t.table, "uuid")
		defer drop()
		if err != nil {
			return "", err
		}
		progress("claims: filling %s with %s rows over 14 days, then a day's cleanup and VACUUM", t.Name, thousands(float64(c.rows)))
		if err := compactFillRows(ctx, db, t.Layout, t.table, "uuid v7", compactRows{N: c.rows, Consumers: 1,
			Start: time.Now().Add(-compactRetention), Step: compactRetention / time.Duration(c.rows)}); err != nil {
			return "", fmt.Errorf("fill %s: %w", t.Name, err)
		}
		if _, err := db.ExecContext(ctx, `VACUUM ANALYZE `+pq.QuoteIdentifier(t.table)); err != nil {
			return "", err
		}
		keep := compactRetention - 24*time.Hour
		if t.Layout == compactTodayName {
			_, err = inbox.Cleanup(ctx, db, inbox.CleanupParams{Retention: keep, BatchSize: c.batch}, inbox.WithTable(t.table))
			tbl := t.table
			t.claim = func(ctx context.Context, tx *sql.Tx, id string) error {
				ok, err := inbox.Postgres.Claim(ctx, driver.StdSQLTx(tx), dialect.ClaimParams{Table: tbl, Consumer: storageConsumer, ID: id, State: "done"})
				if err == nil && !ok {
					err = fmt.Errorf("claim of the new ID %s found a row", id)
				}
				return err
			}
		} else {
			_, err = compactCleanup(ctx, db, t.table, compactLayoutByName(t.Layout).Minutes, compactShapes[0], time.Now().Add(-keep), c.batch, 32)
			// Looked up by name, the consumer's id comes from a subquery of the claim itself: one probe of a table
			// of a few rows, and nothing to keep in the process. Known, it is read once (as a process would when a
			// handler starts, inserting the consumer if it is new) and passed as a parameter.
			query := `INSERT INTO ` + pq.QuoteIdentifier(t.table) + ` (consumer_id, message_id, state)
				VALUES ((SELECT id FROM ` + pq.QuoteIdentifier(t.table+"_consumers") + ` WHERE name = $1), $2, 'd')
				ON CONFLICT (message_id, consumer_id) DO NOTHING
				RETURNING true`
			var consumer any = storageConsumer
			if t.idKnown {
				query = `INSERT INTO ` + pq.QuoteIdentifier(t.table) + ` (consumer_id, message_id, state)
				VALUES ($1, $2, 'd')
				ON CONFLICT (message_id, consumer_id) DO NOTHING
				RETURNING true`
				var id int
				if err := db.QueryRowContext(ctx, `SELECT id FROM `+pq.QuoteIdentifier(t.table+"_consumers")+` WHERE name = $1`,
					storageConsumer).Scan(&id); err != nil {
					return "", err
				}
				consumer = id
			}
			t.claim = func(ctx context.Context, tx *sql.Tx, id string) error {
				var ok bool
				return tx.QueryRowContext(ctx, query, consumer, id).Scan(&ok)
			}
		}
		if err != nil {
			return "", fmt.Errorf("cleanup %s: %w", t.Name, err)
		}
		if _, err := db.ExecContext(ctx, `VACUUM `+pq.QuoteIdentifier(t.table)); err != nil {
			return "", err
		}
	}
	rates := map[string][]float64{}
	for round := 1; round <= c.rounds; round++ {
		order := slices.Clone(tables)
		if round%2 == 0 {
			slices.Reverse(order)
		}
		for _, t := range order {
			rate, err := compactClaimRound(ctx, db, t, c.claims, c.workers)
			if err != nil {
				return "", fmt.Errorf("round %d, %s: %w", round, t.Name, err)
			}
			rates[t.Name] = append(rates[t.Name], rate)
			progress("claims: round %d/%d %-34s %7.0f claims/s", round, c.rounds, t.Name, rate)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Claims per second, %d workers, one claim per transaction, synchronous_commit off, into tables of %s rows "+
		"after a day's cleanup and VACUUM; median (range) of %d rounds of %s claims, rounds interleaved:\n\n",
		c.workers, thousands(float64(c.rows)), c.rounds, thousands(float64(c.claims)))
	base := spreadOf(rates[tables[0].Name]).Median
	var rows [][]string
	for _, t := range tables {
		s := spreadOf(rates[t.Name])
		rows = append(rows, []string{t.Name, s.count(), fmt.Sprintf("%.2f", s.Median/base)})
	}
	b.WriteString(markdownTable([]string{"table", "claims/s", "against today"}, rows))
	return b.String(), nil
}

// compactClaimRound makes n claims of new uuid v7 IDs on t with workers goroutines, each claim its own
// transaction, and returns claims per second.
func compactClaimRound(ctx context.Context, db *sql.DB, t *compactClaimTable, n, workers int) (float64, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				u, err := uuid.NewV7()
				if err == nil {
					err = compactInTx(ctx, db, func(tx *sql.Tx) error { return t.claim(ctx, tx, u.String()) })
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(n) / took.Seconds(), nil
}

// compactWaitHorizon waits, up to limit, until no other session of the database holds a snapshot older than the
// transactions committed so far: then the rows they deleted are dead to everyone, VACUUM removes them and a BRIN
// summary leaves them out. It reports whether that happened within limit.
func compactWaitHorizon(ctx context.Context, db *sql.DB, limit time.Duration) (bool, error) {
	var next string
	if err := db.QueryRowContext(ctx, `SELECT (pg_snapshot_xmax(pg_current_snapshot())::text::bigint % 4294967296)::text`).Scan(&next); err != nil {
		return false, err
	}
	deadline := time.Now().Add(limit)
	for {
		var older int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xmin IS NOT NULL
				AND age(backend_xmin) > age($1::text::xid)`, next).Scan(&older); err != nil {
			return false, err
		}
		if older == 0 {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
