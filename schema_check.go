package inbox

import (
	"fmt"
	"strings"

	"github.com/effectively-once/watermill-inbox/dialect"
)

// schemaErr returns the report as ErrSchemaMissing, ErrSchemaDrift naming each difference, or nil.
func schemaErr(r dialect.SchemaReport, table string) error {
	switch {
	case r.Missing:
		return fmt.Errorf("%w: table %s, and WithAutoMigrate is off", ErrSchemaMissing, table)
	case r.Outdated:
		return fmt.Errorf("%w: table %s has the layout of an older version of the inbox: run inbox.Migrate, which "+
			"moves its rows to the current layout and keeps every one (docs/results/storage.md says what it locks, and for how long)",
			ErrSchemaDrift, table)
	case len(r.Absent) > 0 || len(r.Wrong) > 0:
		return fmt.Errorf("%w: %s", ErrSchemaDrift, strings.Join(append(append([]string(nil), r.Wrong...), r.Absent...), "; "))
	}
	return nil
}
