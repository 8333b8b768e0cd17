package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"
)

// A heap page holds 8,192 bytes less its 24-byte header, and each row takes its tuple (rounded up to 8 bytes)
// plus a 4-byte line pointer. The compact layouts are built so that a uuid row is 56 bytes (48 with processed_at
// in 4-byte minutes) and a text row 72, so the heap per row is known to the byte; a column in the wrong order or of
// the wrong type moves it by whole bytes.
func TestCompactMeasure_HeapBytesPerRowFollowTheColumnLayout(t *testing.T) {
	db := storageTestDB(t)
	ctx := context.Background()
	const rows = 20_000
	perPage := func(tuple int) float64 { return 8192 / float64((8192-24)/(tuple+4)) }
	want := map[string]float64{
		"today/uuid v7":     perPage(72),
		"ids-btree/uuid v7": perPage(56),
		"key-first/uuid v4": perPage(56),
		"key-first/text":    perPage(72),
		"minutes/uuid v7":   perPage(48),
		"minutes/text":      perPage(72),
	}
	got := map[string]compactSizes{}
	for k, w := range want {
		layout, key, _ := strings.Cut(k, "/")
		s, err := compactMeasure(ctx, db, layout, key, rows, 1, 0)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		got[k] = s
		if s.Heap < w-0.1 || s.Heap > w+8192.0/rows+0.1 {
			t.Errorf("%s: heap %.1f bytes per row, want %.1f", k, s.Heap, w)
		}
	}
	// A BRIN index is a metapage, a range map page and a page of summaries at this size; a B-tree has an entry
	// per row.
	if c := got["minutes/uuid v7"].Cleanup; c <= 0 || c > 3*8192.0/rows {
		t.Errorf("minutes: BRIN cleanup index %.2f bytes per row, want at most three pages", c)
	}
	if c := got["ids-btree/uuid v7"].Cleanup; c < 20 {
		t.Errorf("ids-btree: B-tree cleanup index %.2f bytes per row, want an entry per row (about 28 bytes)", c)
	}
	// The compact primary key entry is 8 bytes shorter than today's (a 2-byte id for a 15-byte name, rounded).
	if today, compact := got["today/uuid v7"].PKey, got["minutes/uuid v7"].PKey; compact >= today {
		t.Errorf("primary key %.1f bytes per row, not smaller than today's %.1f", compact, today)
	}
}

// Several consumers claiming time-ordered IDs insert at as many places of a key led by the consumer, and B-tree
// pages that split anywhere but at the right edge are left half empty; led by the message ID, every claim goes to
// the right edge whoever the consumer.
func TestCompactMeasure_KeyLedByMessageIDStaysDenseWithManyConsumers(t *testing.T) {
	db := storageTestDB(t)
	ctx := context.Background()
	const rows = 50_000
	consumerFirst, err := compactMeasure(ctx, db, "ids-brin", "uuid v7", rows, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	keyFirst, err := compactMeasure(ctx, db, "key-first", "uuid v7", rows, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	if keyFirst.PKey*1.2 > consumerFirst.PKey {
		t.Errorf("with 4 consumers the key (message_id, consumer_id) takes %.1f bytes per row and (consumer_id, message_id) %.1f; "+
			"want the first at least a fifth smaller", keyFirst.PKey, consumerFirst.PKey)
	}
}

// compactTestTable creates the recommended layout with BRIN at ppr pages per range and rows rows spread evenly
// over the retention window, ending now, and returns its name.
func compactTestTable(t *testing.T, ppr, rows int) string {
	t.Helper()
	db := storageTestDB(t)
	ctx := context.Background()
	table := fmt.Sprintf("harness_compact_test_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	drop, err := compactCreateRecommended(ctx, db, table, ppr)
	t.Cleanup(drop)
	if err != nil {
		t.Fatal(err)
	}
	if err := compactFillRows(ctx, db, compactRecommended, table, "uuid v7", compactRows{N: rows, Consumers: 2,
		Start: time.Now().Add(-compactRetention), Step: compactRetention / time.Duration(rows)}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `VACUUM ANALYZE `+pq.QuoteIdentifier(table)); err != nil {
		t.Fatal(err)
	}
	return table
}

func TestCompactCleanup_EveryShapeDeletesTheExpiredRowsAndOnlyThose(t *testing.T) {
	db := storageTestDB(t)
	ctx := context.Background()
	for _, shape := range compactShapes {
		t.Run(strings.ReplaceAll(shape.Name, " ", "_"), func(t *testing.T) {
			table := compactTestTable(t, 8, 20_000)
			q := pq.QuoteIdentifier(table)
			cutoff := time.Now().Add(-compactRetention / 2)
			minute := compactMinutes(cutoff)
			var expired, total int64
			if err := db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE processed_at < $1), count(*) FROM `+q, minute).
				Scan(&expired, &total); err != nil {
				t.Fatal(err)
			}
			// A 'processing' row is an unfinished message: no cleanup deletes it, however old.
			if _, err := db.ExecContext(ctx, `UPDATE `+q+` SET state = 'p', locked_until = now()
				WHERE ctid = (SELECT min(ctid) FROM `+q+`)`); err != nil {
				t.Fatal(err)
			}
			r, err := compactCleanup(ctx, db, table, true, shape, cutoff, 700, 8)
			if err != nil {
				t.Fatal(err)
			}
			if r.Deleted != expired-1 {
				t.Errorf("deleted %d rows, want the %d expired ones but the processing one", r.Deleted, expired-1)
			}
			var left, remaining int64
			var recorded time.Time
			if err := db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE processed_at < $1 AND state <> 'p'), count(*),
					(SELECT min(cleaned_before) FROM `+pq.QuoteIdentifier(table+"_consumers")+`) FROM `+q, minute).
				Scan(&left, &remaining, &recorded); err != nil {
				t.Fatal(err)
			}
			if left != 0 || remaining != total-expired+1 {
				t.Errorf("%d expired rows left and %d rows in all, want none and %d", left, remaining, total-expired+1)
			}
			if want := time.Unix(minute*60, 0); !recorded.Equal(want) {
				t.Errorf("consumers remember back to %s, want the cutoff's minute %s", recorded, want)
			}
		})
	}
}

// Deleting a range's rows leaves its summary as wide as before, so every later scan for old rows reads the range;
// summarizing it again from the rows left takes it out of those scans. The table is a temporary one: a summary
// leaves out only rows deleted before every snapshot that could still see them, and for a temporary table that is
// this session's alone, so other sessions of the database cannot hold the outcome back.
func TestCompactResummarize_TakesAnEmptiedRangeOutOfTheCleanupsScan(t *testing.T) {
	storageTestDB(t)
	ctx := context.Background()
	db, err := sql.Open("postgres", testDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1) // one session: the temporary table is its own
	const ppr, rows = 8, 20_000
	table := fmt.Sprintf("harness_compact_temp_%d", os.Getpid())
	ddl := strings.ReplaceAll(compactCommonDDL+compactRowDDL(true, "message_id, consumer_id", 90)+compactBRINDDL(ppr),
		"CREATE TABLE", "CREATE TEMPORARY TABLE")
	ddl = ddl[:strings.Index(ddl, "CREATE FUNCTION")] + ddl[strings.Index(ddl, "CREATE INDEX \"{table}_processed_at\""):]
	if _, err := db.ExecContext(ctx, compactFill(ddl, table, "uuid")); err != nil {
		t.Fatal(err)
	}
	if err := compactFillRows(ctx, db, compactRecommended, table, "uuid v7", compactRows{N: rows, Consumers: 2,
		Start: time.Now().Add(-compactRetention), Step: compactRetention / time.Duration(rows)}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `VACUUM ANALYZE `+pq.QuoteIdentifier(table)); err != nil {
		t.Fatal(err)
	}
	cutoff := time.Now().Add(-compactRetention / 2)
	r, err := compactCleanup(ctx, db, table, true, compactShapes[0], cutoff, 1000, ppr)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Ranges) < 4 {
		t.Fatalf("the cleanup deleted in %d ranges, want the first half of the table's", len(r.Ranges))
	}
	before, err := compactBitmapPages(ctx, db, table, compactMinutes(cutoff))
	if err != nil {
		t.Fatal(err)
	}
	if before < int64(len(r.Ranges)-1)*ppr {
		t.Fatalf("before re-summarizing, a scan for the deleted rows reads %d pages, want the %d ranges they were in", before, len(r.Ranges))
	}
	if err := compactResummarize(ctx, db, table, ppr, r.Ranges, true); err != nil {
		t.Fatal(err)
	}
	after, err := compactBitmapPages(ctx, db, table, compactMinutes(cutoff))
	if err != nil {
		t.Fatal(err)
	}
	// What is left to read is the range that held the cutoff, whose newer rows stay, and the last range, which has
	// no summary until it is full.
	if after > 3*ppr {
		t.Errorf("after re-summarizing, a scan for rows older than the cutoff reads %d pages (%d before), want at most %d", after, before, 3*ppr)
	}
}

func TestRunStorageCompact_PrintsTheTableWithTheGoals(t *testing.T) {
	storageTestDB(t)
	stdout := os.Stdout
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout = w
	runErr := runStorageCompact(context.Background(), []string{"--runs", "1", "--rows", "2000", "--layouts", "today,minutes"})
	os.Stdout = stdout
	w.Close()
	out := new(strings.Builder)
	buf := make([]byte, 1<<16)
	for {
		n, err := r.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if runErr != nil {
		t.Fatal(runErr)
	}
	for _, s := range []string{"| today |", "| minutes |", "uuid v7 (goal ≤ 100)", "| minutes | uuid v7 |"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}
