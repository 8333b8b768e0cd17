package inbox

import (
	"fmt"
	"strings"

	"github.com/effectively-once/watermill-inbox/dialect"
)

// schemaReport is what the schema check found.
type schemaReport struct {
	idType  IDType   // the type of the inbox table's message_id; "" when it is neither text nor uuid
	missing bool     // the inbox table does not exist
	absent  []string // objects of schemaShape that do not exist
	wrong   []string // objects that exist in another shape
	// outdated is true when the inbox table has the layout of an older version, which Migrate moves to this one.
	outdated bool
}

// fromDialectReport turns a dialect's report into the inbox's.
func fromDialectReport(r dialect.SchemaReport) schemaReport {
	return schemaReport{idType: IDType(r.IDType), missing: r.Missing, absent: r.Absent, wrong: r.Wrong, outdated: r.Outdated}
}

// incomplete reports whether only whole objects are missing, which Migrate can add without touching what exists.
func (r schemaReport) incomplete() bool { return len(r.absent) > 0 && len(r.wrong) == 0 }

// err returns the report as ErrSchemaMissing, ErrSchemaDrift naming each difference, or nil.
func (r schemaReport) err(table string) error {
	switch {
	case r.missing:
		return fmt.Errorf("%w: table %s, and WithAutoMigrate is off", ErrSchemaMissing, table)
	case r.outdated:
		return fmt.Errorf("%w: table %s has the layout of an older version of the inbox: run inbox.Migrate, which "+
			"moves its rows to the current layout and keeps every one (docs/results/storage.md says what it locks, and for how long)",
			ErrSchemaDrift, table)
	case len(r.absent) > 0 || len(r.wrong) > 0:
		return fmt.Errorf("%w: %s", ErrSchemaDrift, strings.Join(append(append([]string(nil), r.wrong...), r.absent...), "; "))
	}
	return nil
}
