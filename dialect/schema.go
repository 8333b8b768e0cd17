package dialect

import (
	"context"

	"github.com/effectively-once/watermill-inbox/driver"
)

// Schema is the inbox's tables as a whole, never one message's row: the migrations that make them and their
// versions (Migrations, Migrate), the check of their shape (InspectSchema) and the registration of the consumer
// names the rows refer to (ConsumerID). Migrations reads no database; Migrate and ConsumerID run transactions of
// their own on the pool, which have committed when they return; InspectSchema reads in the executor it is given,
// Migrate's own transaction among others (MigrateParams.Check).
type Schema interface {
	// ConsumerID returns the id the database stores for a consumer's name, registering the name if it is new, in
	// a transaction of its own that has committed when it returns: rows carry the id instead of the name. The
	// inbox asks once per consumer, and again after a claim failed with StaleConsumer, and passes the id in the
	// params of Claims and Leases; a dialect that stores names returns 0.
	ConsumerID(ctx context.Context, pool driver.Pool, table, consumer string) (int, error)
	// Migrations returns the dialect's schema changes for the table, in order.
	Migrations(table string, idType string) ([]Migration, error)
	// Migrate applies the migrations not applied yet, records them in the table's versions table and calls
	// Check before it ends; an error from Check undoes what the database can undo. Many processes may call it at
	// once: they take turns.
	Migrate(ctx context.Context, pool driver.Pool, p MigrateParams) (from, to int, err error)
	// InspectSchema compares the table's schema with the shape the inbox needs.
	InspectSchema(ctx context.Context, q driver.Executor, table string) (SchemaReport, error)
}

// Migration is one versioned schema change of the inbox table.
type Migration struct {
	// Version orders migrations; Migrate applies each once, in ascending order.
	Version int
	// Name is the file name's description, such as "inbox".
	Name string
	// Up and Down are the SQL that applies and reverts the change, for the configured table.
	Up, Down string
}

// MigrateParams are the inputs of Migrate.
type MigrateParams struct {
	Table      string
	Migrations []Migration
	// Check runs once the migrations are applied, with from and to the versions before and after; an error
	// fails Migrate.
	Check func(ctx context.Context, q driver.Executor, from, to int) error
}

// SchemaReport is what InspectSchema found.
type SchemaReport struct {
	// IDType is the type of the inbox table's message_id as the inbox names it ("text", "uuid"), "" for another.
	IDType string
	// Missing is true when the inbox table does not exist.
	Missing bool
	// Absent lists objects that do not exist; Wrong lists objects that exist in another shape.
	Absent, Wrong []string
	// Outdated is true when the inbox table has the layout of an older version, which Migrate moves to the
	// current one.
	Outdated bool
}

// Incomplete reports whether only whole objects are missing, which Migrate can add without touching what exists.
func (r SchemaReport) Incomplete() bool { return len(r.Absent) > 0 && len(r.Wrong) == 0 }
