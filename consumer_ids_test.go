package inbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/effectively-once/watermill-inbox/internal/require"

	inbox "github.com/effectively-once/watermill-inbox"
)

// Every process that starts resolves its consumer's id once. A known name must be found without drawing a value
// from the identity sequence: the ids are smallints, and a fleet that restarts often would otherwise use up all
// 32,767 of them and then fail every registration, old names included.
func TestConsumerIDs_RestartsOfAKnownConsumerDrawNoNewIDs(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	for n := range 20 { // twenty process starts of one consumer
		ib, err := inbox.New(b.db, inbox.WithTable(b.Table), inbox.WithConsumer("wallet-credits"))
		require.NoError(t, err)
		_, err = ib.Middleware(b.Credit(1, nil))(newMsg(fmt.Sprintf("evt-%d", n)))
		require.NoError(t, err)
	}
	ib, err := inbox.New(b.db, inbox.WithTable(b.Table), inbox.WithConsumer("payments"))
	require.NoError(t, err)
	_, err = ib.Middleware(b.Credit(1, nil))(newMsg("evt-0"))
	require.NoError(t, err)

	ids := map[string]int{}
	rows, err := b.db.QueryContext(context.Background(), `SELECT name, id FROM `+b.Table+`_consumers`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var name string
		var id int
		require.NoError(t, rows.Scan(&name, &id))
		ids[name] = id
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]int{"wallet-credits": 1, "payments": 2}, ids)
}
