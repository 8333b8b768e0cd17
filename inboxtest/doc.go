// Package inboxtest is the inbox's behaviour suite: one set of cases that every way of reaching a database runs,
// so that each client library and each database is held to the same behaviour. A driver's test implements
// Harness in a few lines and calls Run:
//
//	func TestSuite_LibPQ(t *testing.T) {
//		t.Parallel()
//		inboxtest.Run(t, inboxtest.HarnessFunc(func(t testing.TB) inboxtest.Conn {
//			db := openDB(t, "postgres")
//			return inboxtest.StdSQL(db, inbox.On(driver.StdSQL(db)), inboxtest.PostgreSQL)
//		}))
//	}
//
// It is for tests only: it fails tests, and no program should import it.
package inboxtest
