package prommetrics_test

import (
	"database/sql"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/prometheus/client_golang/prometheus"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/prommetrics"
)

// The metrics snippet of docs/guides/operations.md, verbatim, for the compiler (see the root's TestREADME_EverySnippetIsCompiledCode).
// The function is compiled, never called.
func readmeMetrics(router *message.Router, db *sql.DB, registry *prometheus.Registry) error {
	obs, err := prommetrics.NewObserver(registry)
	if err != nil {
		return err
	}
	router.AddMiddleware(inbox.Middleware(db, inbox.WithObserver(obs)))
	err = prommetrics.RegisterOldestRowAge(registry, inbox.OnSQL(db), prommetrics.DefaultQueryTimeout) // how far back each consumer remembers
	return err
}

var _ = readmeMetrics
