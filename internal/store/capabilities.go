package store

import (
	"fmt"

	"github.com/effectively-once/watermill-inbox/dialect"
)

// capabilities are the dialect's optional interfaces, found once by New, so that no message's path asks the
// dialect what it can do. A nil field is a capability the dialect does not have.
type capabilities struct {
	rows         dialect.RowsReader      // ReadFinished reads many rows in one statement
	locator      dialect.Locator         // which database a joined transaction is on
	atCommit     dialect.AtCommitClaimer // the claim sent with COMMIT
	fingerprints dialect.Fingerprinter   // WithFingerprint's column
}

func capabilitiesOf(d dialect.Dialect) capabilities {
	var c capabilities
	c.rows, _ = d.(dialect.RowsReader)
	c.locator, _ = d.(dialect.Locator)
	c.atCommit, _ = d.(dialect.AtCommitClaimer)
	c.fingerprints, _ = d.(dialect.Fingerprinter)
	return c
}

// errNoFingerprints is what the fingerprint calls return on a dialect that stores none: the inbox's New refuses
// WithFingerprint for it, so only a caller that skipped that check meets it.
func errNoFingerprints(d dialect.Dialect) error {
	return fmt.Errorf("inbox: the %s dialect stores no fingerprints", d.Name())
}
