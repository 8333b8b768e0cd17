package main

import (
	"cmp"
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectively-once/watermill-inbox/inboxtest"
)

// The tests run the real thing, shortened: kfake in the test process, the consumer as a subprocess built from this
// package (without -race, which would only slow the consumers the faults are aimed at), and PostgreSQL from
// INBOX_TEST_DATABASE_URL or the default DSN. Without PostgreSQL they fail; they never skip.

var (
	setupOnce sync.Once
	sharedEnv *env
	setupErr  error
	binDir    string
)

// TestMain runs the tests, and the consumers they start, in databases of their own on PostgreSQL and MariaDB,
// dropped at the end: the partitioned and cleanup tables the scenarios leave go with them. PostgreSQL is a server
// of the run's own unless INBOX_TEST_DATABASE_URL or HARNESS_TEST_DSN names one.
func TestMain(m *testing.M) {
	code := inboxtest.RunInOwnDatabases(m,
		inboxtest.Database{Driver: "postgres", EnvVar: "INBOX_TEST_DATABASE_URL", DefaultDSN: cmp.Or(os.Getenv("HARNESS_TEST_DSN"), defaultDSN),
			Private: os.Getenv("HARNESS_TEST_DSN") == ""}, // the transport matrix runs watermill-sql's subscribers
		inboxtest.Database{Driver: "mysql", EnvVar: "MYSQL_TEST_DSN", DefaultDSN: defaultMySQLDSN})
	if sharedEnv != nil {
		sharedEnv.close()
	}
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// setup builds the consumer binary and starts the broker once for the package, and connects to PostgreSQL.
func setup(t *testing.T) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL, and builds and runs consumer processes; run without -short")
	}
	setupOnce.Do(func() {
		binDir, setupErr = os.MkdirTemp("", "harness-test-")
		if setupErr != nil {
			return
		}
		bin := filepath.Join(binDir, "harness")
		out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
		if err != nil {
			setupErr = err
			t.Logf("go build: %s", out)
			return
		}
		sharedEnv, setupErr = newEnv(context.Background(), envConfig{
			Bin: bin, LogDir: filepath.Join(binDir, "logs"), DSN: testDSN(), Progress: testProgress{},
			Session: time.Second, Heartbeat: 250 * time.Millisecond, Rebalance: 2 * time.Second,
			Partitions: defaultPartitions, Accounts: 50,
		})
	})
	if setupErr != nil {
		t.Fatalf("harness setup (PostgreSQL at %s must be up; set INBOX_TEST_DATABASE_URL for another): %v", testDSN(), setupErr)
	}
	return sharedEnv
}

// testDSN is the database the tests share: INBOX_TEST_DATABASE_URL, as for the library's tests, or the default.
// HARNESS_TEST_DSN, its older name, is still read.
func testDSN() string {
	return cmp.Or(os.Getenv("INBOX_TEST_DATABASE_URL"), os.Getenv("HARNESS_TEST_DSN"), defaultDSN)
}

// testProgress sends the harness's progress lines to the test log of whichever test is running; the tests of this
// package run one at a time, so there is only ever one.
type testProgress struct{}

var currentT struct {
	sync.Mutex
	t *testing.T
}

func (testProgress) Write(b []byte) (int, error) {
	currentT.Lock()
	defer currentT.Unlock()
	if currentT.t != nil {
		currentT.t.Log(strings.TrimRight(string(b), "\n"))
	}
	return len(b), nil
}

func logTo(t *testing.T) {
	currentT.Lock()
	currentT.t = t
	currentT.Unlock()
	t.Cleanup(func() {
		currentT.Lock()
		currentT.t = nil
		currentT.Unlock()
	})
}

func TestKill_InboxNeitherDuplicatesNorLosesAcrossHardKills(t *testing.T) {
	e := setup(t)
	logTo(t)
	for _, c := range []struct {
		name string
		v    variant
	}{
		{"PerMessage", inboxVariant},
		// Batch mode: a kill ends a batch's one transaction, claims and credits of every member together.
		{"InBatchMode", batchVariant},
		// Batch mode on pgx: the members' first statements in pipelines, a kill ending them mid-flight.
		{"InBatchModeOverPgx", batchPgxVariant},
		// Managed partitions: UUIDv7 IDs, each claim in the partition of its ID's hour.
		{"OnAPartitionedTable", partitionedVariant},
		// pgx with the claim sent with COMMIT: a redelivered copy runs its credit, and the failed claim rolls it back.
		{"WithTheClaimAtCommit", atCommitVariant},
	} {
		t.Run(c.name, func(t *testing.T) {
			logTo(t)
			kc := killConfig{Variants: []variant{c.v}, Runs: 1, Kills: 4, Events: 3000,
				MinWork: 500 * time.Millisecond, MaxWork: 1500 * time.Millisecond, Sleep: 5 * time.Millisecond, Seed: 1, Drain: 3 * time.Minute}
			res, err := runKill(context.Background(), e, kc)
			if err != nil {
				t.Fatal(err)
			}
			r := res[0]
			if r.Kills < 3 {
				t.Fatalf("only %d of %d kills landed while the consumer worked: the run tested too little", r.Kills, kc.Kills)
			}
			if r.Duplicates != 0 || r.Losses != 0 {
				t.Fatalf("%s under %d hard kills: %d duplicate credits, %d lost events; want 0 and 0", c.v, r.Kills, r.Duplicates, r.Losses)
			}
			// Offsets are committed once a second, so every kill leaves committed credits whose offsets were not:
			// the next consumer gets them again. If the inbox skipped none, the kills did not hit what they are for.
			if r.Skipped == 0 {
				t.Fatalf("no redelivery reached the inbox in %d kills", r.Kills)
			}
			// The inbox's rows tell how they were committed: one transaction each per message, several to a
			// transaction in batch mode, with six partitions' messages in flight at once.
			if batched := r.Commits < r.Credits; batched != c.v.batched() {
				t.Fatalf("%s: %d credits committed in %d transactions; batch mode on: %v, want %v", c.v, r.Credits, r.Commits, batched, c.v.batched())
			}
			// The partitioned table proves nothing if its claims all fell through to the default partition.
			if c.v == partitionedVariant && (r.Partitions == 0 || r.InDefault != 0) {
				t.Fatalf("%s: the run's inbox rows lie in %d partitions, %d of them in the default partition; want every row in a partition of its hour",
					c.v, r.Partitions, r.InDefault)
			}
			t.Logf("%s: %d kills, %d redeliveries skipped, 0 duplicates, 0 lost, %d credits in %d commits", c.v, r.Kills, r.Skipped, r.Credits, r.Commits)
		})
	}
}

func TestCrashBetweenCommitAndAck_AfterDBDuplicatesAndInboxDoesNot(t *testing.T) {
	e := setup(t)
	logTo(t)
	t.Run("AfterDBCreditsTheRedeliveredMessageTwice", func(t *testing.T) {
		logTo(t)
		r, err := crashRun(context.Background(), e, afterDB, 600, 150, 2*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if r.Rows != 2 || r.Duplicates < 1 {
			t.Fatalf("after-db crashed after committing %s: %d ledger rows for it, %d duplicates in all; want 2 rows: the harness cannot see a duplicate",
				r.Event, r.Rows, r.Duplicates)
		}
		if r.Losses != 0 {
			t.Fatalf("after-db lost %d events", r.Losses)
		}
	})
	t.Run("InboxSkipsTheRedeliveredMessage", func(t *testing.T) {
		logTo(t)
		r, err := crashRun(context.Background(), e, inboxVariant, 600, 150, 2*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if r.Rows != 1 || r.Duplicates != 0 || r.Losses != 0 {
			t.Fatalf("inbox crashed after committing %s: %d ledger rows for it, %d duplicates, %d lost; want 1, 0, 0",
				r.Event, r.Rows, r.Duplicates, r.Losses)
		}
		if !r.SkippedRe {
			t.Fatalf("the redelivery of %s was not skipped by the inbox: it was never redelivered, so nothing was tested", r.Event)
		}
	})
}

func TestZombie_EvictedHandlerWritesAgainWithoutTheInboxAndOnceWithIt(t *testing.T) {
	shared := setup(t)
	logTo(t)
	e := *shared // the zombie's own group timeouts: see zombieTimeouts
	e.heartbeat, e.rebalance = 500*time.Millisecond, 2*time.Second
	e.session = e.rebalance + 3*time.Second
	c := zombieConfig{Variants: []variant{afterDBSync, inboxVariant}, Runs: 1, Events: 600, Consumers: 3,
		StallEvery: 500, StallFor: e.rebalance + 3*time.Second, Sleep: 2 * time.Millisecond, Seed: 1, Drain: 3 * time.Minute}
	res, err := runZombie(context.Background(), &e, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Stalls != 1 || r.StallsEvicted != 1 || r.ZombieWrites != 1 || r.TakenOver != 1 {
			t.Fatalf("%s: %d stalls, %d evicted, %d zombie writes, %d taken over; want one of each: no zombie was made",
				r.Variant, r.Stalls, r.StallsEvicted, r.ZombieWrites, r.TakenOver)
		}
		switch r.Variant {
		case afterDBSync:
			if r.ZombieDups != 1 {
				t.Fatalf("after-db-sync: the zombie's message was credited %d extra times, want 1", r.ZombieDups)
			}
		case inboxVariant:
			if r.ZombieDups != 0 || r.Duplicates != 0 || r.Losses != 0 {
				t.Fatalf("inbox: %d duplicate credits of the zombie's message, %d in all, %d lost; want 0, 0, 0", r.ZombieDups, r.Duplicates, r.Losses)
			}
			// Once at least; a second rebalance before the skip's offset is committed hands it on again.
			if r.SkippedStalled < 1 {
				t.Fatal("inbox: no other consumer skipped the zombie's message: the zombie was never raced")
			}
		}
	}
}

// This test restarts PostgreSQL: a server it starts for itself, never the one the other tests share, which may be
// anybody's. A pg_ctlcluster on PATH that only records its calls makes sure of that: it is how the machine's own
// clusters are restarted.
func TestDBFaults_InboxRecoversFromTerminationsAndARestartByItself(t *testing.T) {
	shared := setup(t)
	logTo(t)
	calls := tripwire(t)
	ctx := context.Background()
	sharedStart := postmasterStart(t, shared.db)

	srv, err := inboxtest.StartPostgres(ctx)
	if err != nil {
		t.Fatalf("this test restarts a PostgreSQL server it starts itself, and could not start one: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("stop the test's PostgreSQL server: %v", err)
		}
		if _, err := os.Stat(srv.Dir()); !os.IsNotExist(err) {
			t.Errorf("the test's PostgreSQL directory %s is still there after stop (%v)", srv.Dir(), err)
		}
	})
	e, err := shared.withDatabase(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.db.Close() })
	privateStart := postmasterStart(t, e.db)

	// The inbox per message, and on pgx with the claim at commit, whose transactions are open only from the
	// handler's statement to the COMMIT: few of its backends are caught in one, and a run may see none terminated.
	c := dbFaultsConfig{Variants: []variant{inboxVariant, atCommitVariant}, Runs: 1, Events: 3000, Sleep: 5 * time.Millisecond,
		TerminateEvery: 300 * time.Millisecond, Restarts: 1, Restart: srv.Restart, Seed: 1, Drain: 4 * time.Minute}
	res, err := runDBFaults(ctx, e, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(c.Variants) {
		t.Fatalf("%d results for %d variants", len(res), len(c.Variants))
	}
	for _, r := range res {
		if r.Restarts != 1 || (r.Variant == inboxVariant && r.Terminated == 0) {
			t.Fatalf("%s: %d restarts and %d terminated backends: the faults did not happen", r.Variant, r.Restarts, r.Terminated)
		}
		if r.Duplicates != 0 || r.Losses != 0 {
			t.Fatalf("%s under database faults: %d duplicate credits, %d lost events; want 0 and 0", r.Variant, r.Duplicates, r.Losses)
		}
		if !r.SameProcess {
			t.Fatalf("%s: the consumer did not survive the faults in one piece", r.Variant)
		}
		t.Logf("%s: %d backends terminated, back to work %.2fs after the restart, %d failed handlings redelivered, %d skipped",
			r.Variant, r.Terminated, r.Recoveries[0].Seconds(), r.Nacks, r.Skipped)
	}
	if got := postmasterStart(t, e.db); !got.After(privateStart) {
		t.Fatalf("the test's server started at %s before the run and at %s after: it was not restarted", privateStart, got)
	}
	if got := postmasterStart(t, shared.db); !got.Equal(sharedStart) {
		t.Fatalf("the shared server started at %s before the run and at %s after: the test restarted it", sharedStart, got)
	}
	if c := calls(); c != "" {
		t.Fatalf("the test ran pg_ctlcluster %s", c)
	}
}

// The manual command restarts what it started, or what the user said how to restart; a server named only by --dsn
// is nobody's to restart.
func TestDBFaultsCommand_RefusesToRestartAServerNamedOnlyByDSN(t *testing.T) {
	calls := tripwire(t)
	err := dbFaultsCommand(context.Background(), []string{"--dsn", testDSN(), "--restarts", "1", "--runs", "1",
		"--events", "300", "--out", t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "--restart-cmd") {
		t.Fatalf("db-faults --dsn without --restart-cmd: got %v, want a refusal that names --restart-cmd", err)
	}
	if c := calls(); c != "" {
		t.Fatalf("db-faults ran pg_ctlcluster %s", c)
	}
}

func TestCompareVersions_OrdersMajorVersionsNumerically(t *testing.T) {
	t.Parallel()
	versions := []string{"17", "9.6", "15", "10", "9.5"}
	slices.SortFunc(versions, inboxtest.CompareVersions)
	if want := []string{"9.5", "9.6", "10", "15", "17"}; !slices.Equal(versions, want) {
		t.Fatalf("sorted %v, want %v", versions, want)
	}
}

// tripwire puts on PATH a pg_ctlcluster, the packaging's command for the machine's own clusters, that records its
// arguments and fails instead of restarting anything. It returns what has been recorded so far.
func tripwire(t *testing.T) func() string {
	t.Helper()
	dir := t.TempDir()
	record := filepath.Join(dir, "calls")
	script := "#!/bin/sh\necho \"$*\" >> '" + record + "'\necho 'refused: a test restarts only a server it started' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(dir, "pg_ctlcluster"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return func() string {
		b, _ := os.ReadFile(record)
		return strings.TrimSpace(string(b))
	}
}

// postmasterStart is when the server behind db last started: a restart moves it forward.
func postmasterStart(t *testing.T, db *sql.DB) time.Time {
	t.Helper()
	var at time.Time
	if err := db.QueryRow(`SELECT pg_postmaster_start_time()`).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}
