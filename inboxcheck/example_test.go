package inboxcheck_test

import (
	"fmt"
	"strings"

	"github.com/effectively-once/watermill-inbox/inboxcheck"
)

// A wallet handler that credits on the inbox's transaction passes every way of delivery; one that credits on a
// connection of its own fails, and the failure says which way and why.
func ExampleRun() {
	w, err := openWallet()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.close()

	_, failures := runRecorded(w.config(w.credit)) // in a test of yours: inboxcheck.Run(t, cfg)
	fmt.Println("credit on the inbox's transaction:", len(failures), "failures")

	_, failures = runRecorded(w.config(w.leakyCredit))
	fmt.Println("credit on a second connection:", len(failures), "failure")
	fmt.Println(strings.SplitN(failures[0], "\n", 2)[0])
	fmt.Println(strings.Contains(failures[0], "a write on a second connection, or a call to another service, runs again"))
	_ = inboxcheck.Ways
	// Output:
	// credit on the inbox's transaction: 0 failures
	// credit on a second connection: 1 failure
	// inboxcheck: delivered rolled back after the handler, the messages left the state
	// true
}
