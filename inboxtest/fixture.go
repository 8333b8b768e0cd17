package inboxtest

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// UniqueName returns prefix followed by the test process's ID, the clock and a sequence number: a table name that
// no other test, driver or test process uses at the same time. A prefix of up to 24 characters leaves it within
// the inbox's limit of 48 characters for a table name.
func UniqueName(prefix string) string { return testkit.UniqueName(prefix) }

// Wallet is the stage of a test of the inbox, for every driver's tests and the suite's cases: a fresh inbox table
// and a side-effect table of accounts (id, balance) with account 1 at balance 0, in the database of a Conn, both
// dropped when the test ends; and a logger that records what the inbox logs. Its handler, Credit, is not
// idempotent: each of its runs adds to the balance, so a balance tells how often a message was applied.
type Wallet = testkit.Wallet

// NewWallet migrates a fresh inbox table (with opts, besides its name) over conn's Database, creates the accounts
// table, and drops both when the test ends.
func NewWallet(t testing.TB, conn Conn, opts ...inbox.MaintenanceOption) *Wallet {
	return testkit.NewWallet(t, conn, opts...)
}

// NewEmptyWallet is NewWallet without the inbox's tables, for a test of how they come to be (Migrate, or the
// middleware's first message); they are dropped when the test ends all the same.
func NewEmptyWallet(t testing.TB, conn Conn) *Wallet { return testkit.NewEmptyWallet(t, conn) }

// DropInbox removes every object the inbox creates under the name table from conn's database, as a Wallet's Drop
// does, for a test that made an inbox without one.
func DropInbox(t testing.TB, conn Conn, table string) { testkit.DropInbox(t, conn, table) }

// NewMessage returns a message carrying eventID under the default metadata key (none when eventID is empty), with
// a fresh UUID, as a broker's redelivery or a relay's republish would not necessarily keep.
func NewMessage(eventID string) *message.Message { return testkit.NewMessage(eventID) }
