package pgxinbox

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectively-once/watermill-inbox/driver"
)

// PlainBegin returns p with the inbox's round-trip savings switched off. Over a *pgxpool.Pool, a *pgxpool.Conn or
// a *pgx.Conn, the inbox then:
//   - sends BEGIN on its own when it begins a transaction, as pgx's BeginTx does, instead of with the claim: one
//     round trip more per message (per batch in batch mode);
//   - in batch mode, sends each member's savepoint on its own instead of with the member's first statement, and
//     no longer pipelines the members' first statements;
//   - sends no statement with COMMIT, so New refuses WithClaimAtCommit, which sends the claim with COMMIT.
//
// The rest stays: in batch mode a handler's pgx.Tx still refuses Commit and Rollback and is closed when the
// handler returns, and a *pgxpool.Pool's limit of connections still counts. Over any other Beginner PlainBegin
// changes nothing. PlainBegin of a nil p is nil.
//
// Use it where a pgx tracer must see BEGIN as a statement of its own rather than in a batch with the claim,
// behind a proxy that does not accept pipelined statements, or to measure what the savings are worth.
func PlainBegin(p Beginner) Beginner {
	if _, ok := p.(plainBeginner); ok {
		return p
	}
	if isNil(p) {
		return nil
	}
	return plainBeginner{p}
}

// plainBeginner is PlainBegin's Beginner. Over pgx's pools and connections Pool begins its transactions as
// deferredTxs that send BEGIN at once (begin), whose TxCaps (viewCaps) give batch members their views and nothing
// that saves a round trip.
type plainBeginner struct{ b Beginner }

func (p plainBeginner) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	return p.b.BeginTx(ctx, opts)
}

// begin begins a transaction as Pool's Begin does, with BEGIN sent at once, on its own.
func (p plainBeginner) begin(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	begin := beginSQL(opts.ReadCommitted, opts.ReadOnly)
	var t *deferredTx
	switch b := p.b.(type) {
	case acquirer:
		c, err := b.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		t = newDeferredTx(c.Conn(), c, begin)
	case *pgxpool.Conn:
		t = newDeferredTx(b.Conn(), nil, begin)
	case *pgx.Conn:
		t = newDeferredTx(b, nil, begin)
	default:
		return beginTx(ctx, p.b, opts)
	}
	if err := t.ensureBegun(ctx); err != nil {
		t.end() // gives a pool's connection back; ensureBegun closed it
		return nil, err
	}
	return (*deferredView)(t), nil
}
