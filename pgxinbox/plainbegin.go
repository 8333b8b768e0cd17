package pgxinbox

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// PlainBegin returns p with the inbox's round-trip savings switched off. Over a *pgxpool.Pool, a *pgxpool.Conn or
// a *pgx.Conn, the inbox then:
//   - begins each transaction with the pool's BeginTx, which sends BEGIN on its own instead of with the claim: one
//     round trip more per message (per batch in batch mode);
//   - in batch mode, sends each member's savepoint on its own instead of with the member's first statement, and
//     no longer pipelines the members' first statements: the members run theirs one after another, and with
//     zero-work handlers at 64 in flight batch mode ran no faster than per-message mode (2,649 against 2,865
//     msgs/s, docs/results/curves);
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

// plainBeginner is PlainBegin's Beginner: it has p's BeginTx and hides p's type, so that Pool begins every
// transaction with BeginTx, as for any Beginner, and gives batch members their views (viewCaps) and nothing that
// saves a round trip.
type plainBeginner struct{ b Beginner }

func (p plainBeginner) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	return p.b.BeginTx(ctx, opts)
}
