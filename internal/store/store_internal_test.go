package store

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/effectively-once/watermill-inbox/dialect/postgres"
)

// pgError is a driver error with a PostgreSQL error code, as the dialect classifies them.
type pgError string

func (e pgError) Error() string    { return "pg error " + string(e) }
func (e pgError) SQLState() string { return string(e) }

func TestStoreWrap_BlamesTheEventIDOnlyWhereItIsTheOneUncheckedInput(t *testing.T) {
	t.Parallel()
	s := New(postgres.Dialect(), "watermill_inbox", nil)
	refusals := []pgError{"22P02", "22021", "54000"}

	for _, op := range []string{"claim", "claim lease"} {
		for _, code := range refusals {
			err := s.wrap(op, "wallet-credits", "evt-1", code)
			require.ErrorIs(t, err, ErrInvalidEventID, "%s %s", op, code)
			require.ErrorIs(t, err, code)
		}
	}
	for _, op := range []string{"read produced messages", "store produced messages", "finish claim", "read lease", "extend lease", "release lease", "complete lease", "mark failed"} {
		for _, code := range refusals {
			err := s.wrap(op, "wallet-credits", "evt-1", code)
			require.False(t, errors.Is(err, ErrInvalidEventID), "%s %s: the ID was accepted by the claim before", op, code)
			require.ErrorIs(t, err, code, "the driver error is kept")
		}
	}
	require.ErrorIs(t, s.wrap("store produced messages", "c", "evt-1", pgError("42P01")), ErrSchemaMissing)
}
