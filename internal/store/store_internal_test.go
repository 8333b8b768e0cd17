package store

import (
	"errors"
	"testing"

	"github.com/effectively-once/watermill-inbox/internal/require"

	"github.com/effectively-once/watermill-inbox/dialect/postgres"
)

// pgError is a driver error with a PostgreSQL error code, as the dialect classifies them.
type pgError string

func (e pgError) Error() string    { return "pg error " + string(e) }
func (e pgError) SQLState() string { return string(e) }

func TestStoreWrap_BlamesTheEventIDOnlyWhereItIsTheOneUncheckedInput(t *testing.T) {
	t.Parallel()
	s := New(postgres.Dialect(), "watermill_inbox", nil)
	refusals := []pgError{"22P02", "54000"}

	blamed := 0
	for o := range opCount {
		for _, code := range refusals {
			err := s.wrap(o, "wallet-credits", "evt-1", code)
			require.ErrorIs(t, err, code, "%s %s: the driver error is kept", o, code)
			if o.sendsIDFirst() {
				require.ErrorIs(t, err, ErrInvalidEventID, "%s %s", o, code)
				continue
			}
			require.False(t, errors.Is(err, ErrInvalidEventID), "%s %s: the ID was accepted by the claim before", o, code)
		}
		if o.sendsIDFirst() {
			blamed++
		}
	}
	require.Equal(t, 2, blamed, "the claim in a transaction and the lease's claim send the ID first")
	require.ErrorIs(t, s.wrap(opStoreProduced, "c", "evt-1", pgError("42P01")), ErrSchemaMissing)
}

// An ID the inbox checked as UTF-8 that the server read in another encoding, or the claim's check of the session's
// encoding, is the session's fault, never the ID's: whatever the statement, it is ErrClientEncoding, and the message
// is held back instead of dead-lettered.
func TestStoreWrap_BlamesTheSessionsEncodingNotTheEventID(t *testing.T) {
	t.Parallel()
	s := New(postgres.Dialect(), "watermill_inbox", nil)
	for o := range opCount {
		for _, code := range []pgError{"22012", "22021", "22P05"} {
			err := s.wrap(o, "wallet-credits", "evt-1", code)
			require.ErrorIs(t, err, ErrClientEncoding, "%s %s", o, code)
			require.False(t, errors.Is(err, ErrInvalidEventID), "%s %s", o, code)
			require.ErrorIs(t, err, code, "the driver error is kept")
		}
	}
}
