package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests run the real thing, shortened: kfake in the test process, the consumer as a subprocess built from this
// package (without -race, which would only slow the consumers the faults are aimed at), and PostgreSQL from
// HARNESS_TEST_DSN or the default DSN. Without PostgreSQL they fail; they never skip.

var (
	setupOnce sync.Once
	sharedEnv *env
	setupErr  error
	binDir    string
)

func TestMain(m *testing.M) {
	code := m.Run()
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
		dsn := os.Getenv("HARNESS_TEST_DSN")
		if dsn == "" {
			dsn = defaultDSN
		}
		sharedEnv, setupErr = newEnv(context.Background(), envConfig{
			Bin: bin, LogDir: filepath.Join(binDir, "logs"), DSN: dsn, Progress: testProgress{},
			Session: time.Second, Heartbeat: 250 * time.Millisecond, Rebalance: 2 * time.Second,
			Partitions: defaultPartitions, Accounts: 50,
		})
	})
	if setupErr != nil {
		t.Fatalf("harness setup (PostgreSQL at HARNESS_TEST_DSN or %s must be up): %v", defaultDSN, setupErr)
	}
	return sharedEnv
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
	c := killConfig{Variants: []variant{inboxVariant}, Runs: 1, Kills: 4, Events: 3000,
		MinWork: 500 * time.Millisecond, MaxWork: 1500 * time.Millisecond, Sleep: 5 * time.Millisecond, Seed: 1, Drain: 3 * time.Minute}
	res, err := runKill(context.Background(), e, c)
	if err != nil {
		t.Fatal(err)
	}
	r := res[0]
	if r.Kills < 3 {
		t.Fatalf("only %d of %d kills landed while the consumer worked: the run tested too little", r.Kills, c.Kills)
	}
	if r.Duplicates != 0 || r.Losses != 0 {
		t.Fatalf("inbox under %d hard kills: %d duplicate credits, %d lost events; want 0 and 0", r.Kills, r.Duplicates, r.Losses)
	}
	// Offsets are committed once a second, so every kill leaves committed credits whose offsets were not: the
	// next consumer gets them again. If the inbox skipped none, the kills did not hit what they are for.
	if r.Skipped == 0 {
		t.Fatalf("no redelivery reached the inbox in %d kills", r.Kills)
	}
	t.Logf("%d kills, %d redeliveries skipped, 0 duplicates, 0 lost", r.Kills, r.Skipped)
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

// This test restarts PostgreSQL: other packages' tests must not run against it at the same time.
func TestDBFaults_InboxRecoversFromTerminationsAndARestartByItself(t *testing.T) {
	e := setup(t)
	logTo(t)
	if err := postgresRestartable(); err != nil {
		t.Fatalf("this test restarts PostgreSQL: %v", err)
	}
	c := dbFaultsConfig{Variants: []variant{inboxVariant}, Runs: 1, Events: 3000, Sleep: 5 * time.Millisecond,
		TerminateEvery: 300 * time.Millisecond, Restarts: 1, RestartCmd: defaultRestartCmd, Seed: 1, Drain: 4 * time.Minute}
	res, err := runDBFaults(context.Background(), e, c)
	if err != nil {
		t.Fatal(err)
	}
	r := res[0]
	if r.Restarts != 1 || r.Terminated == 0 {
		t.Fatalf("%d restarts and %d terminated backends: the faults did not happen", r.Restarts, r.Terminated)
	}
	if r.Duplicates != 0 || r.Losses != 0 {
		t.Fatalf("inbox under database faults: %d duplicate credits, %d lost events; want 0 and 0", r.Duplicates, r.Losses)
	}
	if !r.SameProcess {
		t.Fatal("the consumer did not survive the faults in one piece")
	}
	t.Logf("%d backends terminated, back to work %.2fs after the restart, %d failed handlings redelivered, %d skipped",
		r.Terminated, r.Recoveries[0].Seconds(), r.Nacks, r.Skipped)
}
