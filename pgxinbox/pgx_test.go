package pgxinbox_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

func TestANilPoolOrConnectionIsRefusedWhenTheInboxIsBuilt(t *testing.T) {
	t.Parallel()
	for name, p := range map[string]pgxinbox.Beginner{
		"Pool":       (*pgxpool.Pool)(nil),
		"Conn":       (*pgx.Conn)(nil),
		"PooledConn": (*pgxpool.Conn)(nil),
		"UntypedNil": nil,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := pgxinbox.New(p, inbox.WithConsumer("wallet-credits"))
			require.ErrorIs(t, err, inbox.ErrInvalidOption)
			require.ErrorContains(t, err, "nil")

			err = pgxinbox.Database(p).Migrate(context.Background())
			require.ErrorIs(t, err, inbox.ErrInvalidOption)

			_, err = pgxinbox.Database(p).ReadStats(context.Background())
			require.Error(t, err)
		})
	}
}
