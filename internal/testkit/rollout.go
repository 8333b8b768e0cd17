package testkit

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// aRolloutStallsNoClaim: a new instance whose options need a schema change (WithFingerprint adds a column) starts
// while the fleet runs, and a handler of the fleet holds its transaction open. The schema change, which needs the
// table to itself, does not wait for that transaction, and so does not hold up, behind it, the fleet's claims: it
// gives up at once (PostgreSQL: after 50 ms), and tries again after a pause, while the fleet's messages go on being
// applied. Once the slow handler ends, the change goes through and the new instance applies its message.
func aRolloutStallsNoClaim(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	var calls atomic.Int64
	credit := b.Credit(1, &calls)
	holding, release := make(chan struct{}), make(chan struct{})
	var released atomic.Bool
	let := func() {
		if released.CompareAndSwap(false, true) {
			close(release)
		}
	}
	t.Cleanup(let)
	fleet := b.inbox(t).Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if msg.Metadata.Get(inbox.DefaultIDMetadataKey) == "slow" {
			// It works long, holding its claim (and so a lock on the inbox table), and touches no row the
			// others write.
			close(holding)
			<-release
			return nil, nil
		}
		return credit(msg)
	})
	_, err := fleet(newMsg("warm")) // the fleet checked its schema and registered its consumer
	require.NoError(t, err)
	slow := make(chan error, 1)
	go func() { _, err := fleet(newMsg("slow")); slow <- err }()
	<-holding // the slow handler's transaction holds its claim, and the table's lock with it

	newer := b.inbox(t, inbox.WithFingerprint(inbox.Fingerprint{})).Middleware(credit)
	rolledOut := make(chan error, 1)
	go func() { _, err := newer(newMsg("new-1")); rolledOut <- err }()
	retries := func() int { return b.Logs.Count("Inbox migration met a lock and tries again") }
	require.Eventually(t, func() bool { return retries() >= 1 }, 20*time.Second, time.Millisecond,
		"the schema change met the slow handler's lock, and gave up waiting for it")

	// The fleet's messages are applied while the schema change tries again, twice more.
	n, longest := 0, time.Duration(0)
	for until := retries() + 2; retries() < until; n++ {
		start := time.Now()
		_, err := fleet(newMsg(fmt.Sprintf("evt-%d", n)))
		longest = max(longest, time.Since(start))
		require.NoError(t, err, "a claim of the fleet while the schema change waits for the slow handler")
		require.Less(t, n, 100000, "the schema change tried no more")
	}
	require.Positive(t, n)
	t.Logf("%d messages of the fleet applied during two tries of the schema change; the longest took %s", n, longest)

	let()
	require.NoError(t, <-slow)
	require.NoError(t, <-rolledOut, "once the slow handler ended, the schema change went through")
	require.EqualValues(t, n+2, b.Balance(t), "every message applied once")
	require.EqualValues(t, n+3, b.rows(t))
}
