package inbox_test

import (
	"os"
	"os/exec"
	"testing"
)

// TestTheInboxWorksWithPgxsDriverToo reruns the middleware, lease, ID-type, composition, produced-message and
// mode-switch tests in a child process that talks to PostgreSQL through pgx's database/sql driver instead of
// lib/pq: the inbox depends on no one driver's types or error values.
func TestTheInboxWorksWithPgxsDriverToo(t *testing.T) {
	t.Parallel()
	needsDB(t)
	cmd := exec.Command(os.Args[0], "-test.run=^(TestMiddleware|TestLease_Claim|TestLease_Takeover|TestLease_HandlerErrors|TestIDTypeUUID|TestComposition|TestProducedMessages|TestModeSwitch|TestSubscriberTx_ARedelivery|TestSubscriberTx_TwoConsumer)", "-test.count=1")
	cmd.Env = append(os.Environ(), "INBOX_TEST_DRIVER=pgx")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("with pgx's driver: %v\n%s", err, out)
	}
}
