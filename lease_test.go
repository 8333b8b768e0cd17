package inbox_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// Lease mode on every driver is in the driver suite (inboxtest's LeaseMode... cases); these are the helpers of
// the root's tests that read or write PostgreSQL's table itself (a crash, a pgbouncer, a mode switch).

// leaseRow is an inbox row as lease mode leaves it.
type leaseRow struct {
	state, token, lastError string
	attempts                int
	live                    bool
}

func (b *testBundle) leaseRow(t testing.TB, id string) leaseRow {
	t.Helper()
	var r leaseRow
	require.NoError(t, b.db.QueryRow(`SELECT state, coalesce(lease_token::text, ''), coalesce(last_error, ''),
		coalesce(attempts, 0), coalesce(locked_until > now(), false)
		FROM `+b.Table+`_view WHERE consumer = 'wallet-credits' AND message_id = $1`, id).
		Scan(&r.state, &r.token, &r.lastError, &r.attempts, &r.live))
	return r
}

// consumerID registers consumer in the inbox's consumers table, as an Inbox does at its first claim, and returns
// the id its rows carry: for rows a test writes as another process would have left them.
func (b *testBundle) consumerID(t testing.TB, consumer string) int {
	t.Helper()
	_, err := b.db.Exec(`INSERT INTO `+b.Table+`_consumers (name) VALUES ($1) ON CONFLICT (name) DO NOTHING`, consumer)
	require.NoError(t, err)
	var id int
	require.NoError(t, b.db.QueryRow(`SELECT id FROM `+b.Table+`_consumers WHERE name = $1`, consumer).Scan(&id))
	return id
}

func leaseOf(t testing.TB, msg *message.Message) *inbox.Lease {
	t.Helper()
	l, ok := inbox.LeaseFromContext(msg.Context())
	require.True(t, ok, "a lease-mode handler has a lease in its context")
	return l
}

func TestNew_LeaseOptionsAreCheckedTogether(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	for name, opts := range map[string][]inbox.Option{
		"MaxAttemptsWithoutLease": {inbox.WithMaxAttempts(3)},
		"LeaseTooShort":           {inbox.WithLease(time.Millisecond)},
		"LeaseTooLong":            {inbox.WithLease(48 * time.Hour)},
		"NegativeMaxAttempts":     {inbox.WithLease(time.Second), inbox.WithMaxAttempts(-1)},
	} {
		_, err := inbox.New(db, opts...)
		require.ErrorIs(t, err, inbox.ErrInvalidOption, name)
	}
}
