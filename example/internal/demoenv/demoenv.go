// Package demoenv is what the examples read from their environment, and the -h text that tells a reader so.
package demoenv

import (
	"cmp"
	"flag"
	"fmt"
	"os"
)

// DefaultDatabaseURL is the database an example uses when DATABASE_URL is unset: the local PostgreSQL that the
// tests use too.
const DefaultDatabaseURL = "postgres://root@127.0.0.1:5432/test?sslmode=disable"

// DatabaseURL returns DATABASE_URL, or DefaultDatabaseURL when it is unset or empty.
func DatabaseURL() string {
	return cmp.Or(os.Getenv("DATABASE_URL"), DefaultDatabaseURL)
}

// SetUsage makes -h on the command line print how to run the example at path (as given to go run), what it
// shows, the environment variables it reads with their defaults, and its flags.
func SetUsage(path, about string) {
	flag.Usage = func() {
		w := flag.CommandLine.Output()
		fmt.Fprintf(w, "Usage: go run %s [flags]\n\n%s\n\n", path, about)
		fmt.Fprintf(w, "Environment:\n"+
			"  DATABASE_URL   PostgreSQL connection URL (default %s)\n"+
			"  KAFKA_BROKERS  comma-separated host:port of a Kafka cluster (default: none; a Kafka-protocol broker\n"+
			"                 runs inside the process, so the example needs nothing but PostgreSQL)\n\n"+
			"Flags:\n", DefaultDatabaseURL)
		flag.PrintDefaults()
	}
}
