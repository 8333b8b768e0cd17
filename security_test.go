package inbox_test

import (
	"testing"

	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// The security tests over lib/pq: testkit.PostgresSecurity says what they prove. The fuzz tests run with
// go test -run '^$' -fuzz FuzzSecurity_EventID -fuzztime 60s . (and the same for the other two).
func libpqSecurity() testkit.PostgresSecurity {
	return testkit.PostgresSecurity{DSN: testDSN(), Driver: testDriver, Open: func(t testing.TB, dsn string) testkit.SessionConn {
		return testkit.StdSQLSession(testkit.OpenSessionDB(t, testDriver, dsn, 1))
	}}
}

func TestSecurity_AHostileEventIDIsStoredExactlyOrRefusedUnderEverySessionSetting(t *testing.T) {
	t.Parallel()
	libpqSecurity().Matrix(t)
}

func FuzzSecurity_EventID(f *testing.F) { libpqSecurity().FuzzEventID(f) }

func FuzzSecurity_ConsumerName(f *testing.F) { libpqSecurity().FuzzConsumerName(f) }

func FuzzSecurity_ErrorText(f *testing.F) { libpqSecurity().FuzzErrorText(f) }
