package main

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	inbox "github.com/effectively-once/watermill-inbox"
)

// The transport matrix, short: a few hundred events per cell and a few kills, cells one after another. Each broker
// must be up on this machine (see the start commands in transports.go); one that is down fails its subtest with
// the command that starts it.
func TestTransports_InboxCreditsEachEventOnceOverEveryTransportAcrossKills(t *testing.T) {
	e := setup(t)
	logTo(t)
	base := transportsConfig{Runs: 1, Events: 300, DupRate: 0.2, Stop: stopKill, MinWork: 300 * time.Millisecond, MaxWork: 700 * time.Millisecond,
		Sleep: 3 * time.Millisecond, Settle: time.Second, Drain: 90 * time.Second, Seed: 1,
		Addrs: transportAddrs{AMQP: defaultAMQPURL, NATS: defaultNATSURL, Redis: defaultRedisAddr}}
	for _, kind := range allTransports {
		t.Run(string(kind), func(t *testing.T) {
			logTo(t)
			t.Run("WithTheInboxNoDuplicateNoLoss", func(t *testing.T) {
				logTo(t)
				c := base
				c.Transports, c.Variants, c.Kills = []transportKind{kind}, []variant{inboxVariant}, 3
				r := runCell(t, e, c)
				if kind != goChannel && r.Kills < 2 {
					t.Fatalf("only %d of %d kills landed while the consumer worked: the run tested too little", r.Kills, c.Kills)
				}
				if r.Duplicates != 0 || r.Losses != 0 || !r.Drained {
					t.Fatalf("%s with the inbox, %d kills: %d duplicate effects, %d lost events, drained %v (broker still holds %d); want 0, 0, drained",
						kind, r.Kills, r.Duplicates, r.Losses, r.Drained, r.Left)
				}
				// Every republished copy reaches the consumer; if the inbox skipped fewer, some copy was never
				// delivered, and the cell proved less than it claims.
				if r.Copies == 0 || r.Skipped < r.Copies {
					t.Fatalf("%s: the inbox skipped %d deliveries for %d republished copies", kind, r.Skipped, r.Copies)
				}
				t.Logf("%s: %d kills, %d copies, %d skipped, 0 duplicates, 0 lost", kind, r.Kills, r.Copies, r.Skipped)
			})
			t.Run("WithoutTheInboxTheLedgerShowsTheDuplicates", func(t *testing.T) {
				logTo(t)
				c := base
				c.Transports, c.Variants, c.Kills = []transportKind{kind}, []variant{afterDB}, 1
				r := runCell(t, e, c)
				if r.Copies == 0 || r.Duplicates < r.Copies {
					t.Fatalf("%s without the inbox: %d duplicate effects for %d republished copies; the harness cannot see a duplicate",
						kind, r.Duplicates, r.Copies)
				}
				if r.Losses != 0 || !r.Drained {
					t.Fatalf("%s without the inbox: %d lost, drained %v; a loss here is the harness's or the broker's, not the inbox's",
						kind, r.Losses, r.Drained)
				}
			})
		})
	}
}

func runCell(t *testing.T, e *env, c transportsConfig) transportResult {
	t.Helper()
	res, err := runTransports(context.Background(), e, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 {
		t.Fatalf("%d results for one cell", len(res))
	}
	return res[0]
}

func TestTransportEvents_RepublishesAShareUnderTheSameEventIDAsNewMessages(t *testing.T) {
	t.Parallel()
	msgs, evs, copies := transportEvents(1000, 10, 0.2, rand.New(rand.NewPCG(3, 3)))
	if len(msgs) != len(evs)+copies {
		t.Fatalf("%d messages for %d events and %d copies", len(msgs), len(evs), copies)
	}
	if copies < 150 || copies > 250 {
		t.Fatalf("%d copies of 1000 events at a rate of 0.2", copies)
	}
	uuids := map[string]bool{}
	perEvent := map[string]int{}
	firstAt := map[string]int{}
	for i, m := range msgs {
		if uuids[m.UUID] {
			t.Fatalf("message UUID %s used twice: a copy must be a new message", m.UUID)
		}
		uuids[m.UUID] = true
		id := m.Metadata.Get(inbox.DefaultIDMetadataKey)
		if id == "" {
			t.Fatalf("message %d has no event ID", i)
		}
		if perEvent[id] == 0 {
			firstAt[id] = i
		} else if i < firstAt[id] {
			t.Fatalf("a copy of %s precedes its original", id)
		}
		perEvent[id]++
	}
	twice := 0
	for _, ev := range evs {
		switch perEvent[ev.ID] {
		case 1:
		case 2:
			twice++
		default:
			t.Fatalf("event %s published %d times", ev.ID, perEvent[ev.ID])
		}
	}
	if twice != copies {
		t.Fatalf("%d events published twice, %d copies reported", twice, copies)
	}
}

func TestTransportsReport_ATermRunCountsItsStopsAndTheUncleanExits(t *testing.T) {
	t.Parallel()
	res := []transportResult{
		{Transport: sqlV4PgxTransport, Variant: inboxVariant, Events: 100, Copies: 20, Kills: 5, Unclean: 2, Drained: true},
		{Transport: sqlV4PgxTransport, Variant: inboxVariant, Events: 100, Copies: 20, Kills: 5, Unclean: 1, Drained: true},
	}
	c := transportsConfig{Transports: []transportKind{sqlV4PgxTransport}, Variants: []variant{inboxVariant}}
	c.Stop = stopTerm
	term := transportsReport(c, res)
	if !strings.Contains(term, "| SIGTERM stops (unclean exits) |") || !strings.Contains(term, "| sql-v4-pgx | inbox | 2 | 200 | 40 | 10 (3) |") {
		t.Fatalf("a term run's table does not count its stops and unclean exits:\n%s", term)
	}
	c.Stop = stopKill
	kill := transportsReport(c, res)
	if !strings.Contains(kill, "| Kills |") || !strings.Contains(kill, "| sql-v4-pgx | inbox | 2 | 200 | 40 | 10 |") {
		t.Fatalf("a kill run's table is not the matrix's:\n%s", kill)
	}
}
