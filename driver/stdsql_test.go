package driver

import (
	"cmp"
	"context"
	"database/sql"
	"os"
	"runtime"
	"testing"
	"time"

	_ "github.com/lib/pq"
)

// openLibpq connects to the test database (INBOX_TEST_DATABASE_URL, or this machine's) with lib/pq, failing loudly
// when it cannot.
func openLibpq(t testing.TB) *sql.DB {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL; run without -short")
	}
	dsn := cmp.Or(os.Getenv("INBOX_TEST_DATABASE_URL"), "postgres://root@127.0.0.1:5432/test?sslmode=disable")
	db, err := sql.Open("postgres", dsn)
	if err == nil {
		t.Cleanup(func() { db.Close() })
		err = db.Ping()
	}
	if err != nil {
		t.Fatalf("PostgreSQL is not reachable at %s (set INBOX_TEST_DATABASE_URL): %v", dsn, err)
	}
	return db
}

func begin(t *testing.T, p Pool) stdTx {
	t.Helper()
	tx, err := p.Begin(context.Background(), TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tx.(stdTx)
}

func TestStdSQL_ATransactionOverLibpqKnowsItsConnectionsNotes(t *testing.T) {
	db := openLibpq(t)
	db.SetMaxOpenConns(1)
	p := StdSQL(db)
	first := begin(t, p)
	notes := first.Session()
	if notes == nil {
		t.Fatal("a transaction over lib/pq has its connection's notes")
	}
	notes.Store("k", "v")
	if err := first.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	second := begin(t, p) // the pool's one connection: it was given back at the commit
	if second.Session() != notes {
		t.Fatal("the next transaction on the same connection finds the same notes")
	}
	if err := second.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := second.Rollback(context.Background()); err != ErrTxDone {
		t.Fatalf("a second rollback: want ErrTxDone, got %v", err)
	}

	third := begin(t, p)
	third.SessionLost()
	if third.Session() != nil {
		t.Fatal("no notes once a session was lost")
	}
	if err := third.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if after := begin(t, p); after.conn != nil || after.Session() != nil {
		t.Fatal("once a session was lost, transactions begin as database/sql begins them, with no notes")
	} else if err := after.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	if open := db.Stats().InUse; open != 0 {
		t.Fatalf("every connection went back to the pool; %d in use", open)
	}
}

func TestStdSQL_NotesGoWithTheirConnection(t *testing.T) {
	db := openLibpq(t)
	db.SetMaxIdleConns(0) // each connection is closed when its transaction ends
	p := StdSQL(db).(stdPool)
	for range 20 {
		tx := begin(t, p)
		tx.Session().Store("k", "v")
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		n := 0
		p.sessions.m.Range(func(any, any) bool { n++; return true })
		return n
	}
	if n := count(); n == 0 {
		t.Fatal("the connections' notes were kept while they lived")
	}
	deadline := time.Now().Add(5 * time.Second)
	for count() > 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if n := count(); n > 0 {
		t.Fatalf("the notes of %d closed connections are still kept", n)
	}
}

func TestStdSQL_NoNotesOverOtherDrivers(t *testing.T) {
	if p := StdSQL(nil).(stdPool); p.sessions != nil {
		t.Fatal("a pool without lib/pq keeps no notes")
	}
	if (stdTx{}).LiteralArgs() {
		t.Fatal("a transaction without lib/pq keeps its arguments")
	}
}
