package inboxtest

import (
	"testing"

	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// Run runs every case of the suite against the database h opens, each as a parallel subtest with tables of its
// own. Under -short it skips: every case needs the database. Without -short a database that cannot be reached
// fails the test (the Harness's Open says how to start it).
func Run(t *testing.T, h Harness) { testkit.Run(t, h) }

// RunCases runs the cases of the suite named names, as Run does, for a database set up in a way the one Run runs
// against is not (a server option that changes how its transactions end, say). It fails t for a name it does not
// know.
func RunCases(t *testing.T, h Harness, names ...string) { testkit.RunCases(t, h, names...) }
