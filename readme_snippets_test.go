package inbox_test

import (
	"context"
	"database/sql"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/observe"
)

// The code of the README and of the guides in docs/guides, each snippet verbatim inside a function that gives it
// its surroundings, so that the compiler checks it; TestREADME_EverySnippetIsCompiledCode checks that each snippet
// is here or in another module's file of the same kind. The functions are compiled, never called.

func readmeCardLine(router *message.Router, db *sql.DB, pub message.Publisher) {
	router.AddMiddleware(inbox.Middleware(db, inbox.WithDeadLetter(pub, "wallet-credits.dead")))
}

func readmeUsage(ctx context.Context, dsn string, router *message.Router, pub message.Publisher, sub message.Subscriber,
	amount, id int) error {
	db, _ := sql.Open("postgres", dsn)                   // lib/pq, or pgx's stdlib driver
	if err := inbox.OnSQL(db).Migrate(ctx); err != nil { // optional: the first message migrates too (WithAutoMigrate)
		return err
	}

	// A message without a usable event ID goes to the dead-letter topic instead of holding up those behind it.
	router.AddMiddleware(inbox.Middleware(db, inbox.WithDeadLetter(pub, "wallet-credits.dead")))
	router.AddConsumerHandler("wallet-credits", "deposits", sub, inbox.Handler(
		func(ctx context.Context, tx *sql.Tx, msg *message.Message) error { // tx commits with the inbox row
			_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", amount, id)
			return err
		}))
	return nil
}

func readmeEventIDPublisher(pub message.Publisher) message.Publisher {
	pub = inbox.EventIDPublisher(pub, "") // stamps event_id from the message UUID when the producer set none
	return pub
}

func readmeEventIDByHand(pub message.Publisher, payload []byte, order struct{ ID string }) error {
	msg := message.NewMessage(watermill.NewUUID(), payload) // a new UUID on every resend
	msg.Metadata.Set("event_id", "order-"+order.ID+"-paid") // the same ID on every resend: the consumer skips copies
	err := pub.Publish("orders", msg)
	return err
}

func readmeLease(router *message.Router, db *sql.DB, pub message.Publisher, sub message.Subscriber, amount int,
	provider interface {
		Charge(ctx context.Context, amount int, idempotencyKey string) error
	}) {
	router.AddMiddleware(inbox.Middleware(db, inbox.WithLease(30*time.Second), inbox.WithDeadLetter(pub, "payments.dlq")))
	router.AddConsumerHandler("payments", "payment-requests", sub, func(msg *message.Message) error {
		lease, _ := inbox.LeaseFromContext(msg.Context())
		if lease.Attempt() > 1 {
			// An earlier attempt may have reached the provider before it died: ask before calling again, if you can.
		}
		return provider.Charge(msg.Context(), amount, lease.IdempotencyKey())
	})
}

func readmeRetryAndPoison(router *message.Router, db *sql.DB, pub message.Publisher) {
	poison, _ := middleware.PoisonQueue(pub, "deposits.poison")
	router.AddMiddleware(
		poison, // outermost: parks what Retry gave up on, then acks
		middleware.Retry{
			MaxRetries:      3,
			InitialInterval: 100 * time.Millisecond,
			// No retry for what a retry cannot mend: a message without a usable event ID, or a schema fault.
			ShouldRetry: func(p middleware.RetryParams) bool { return !inbox.IsPermanent(p.Err) },
		}.Middleware,
		inbox.Middleware(db), // innermost: one fresh transaction per attempt
	)
	router.AddSubscriberDecorators(inbox.EndDelaysOnClose) // Close ends the inbox's waits at once
}

func readmeSQLv3(router *message.Router, db *sql.DB, opts ...inbox.Option) (*inbox.Inbox, error) {
	router.AddMiddleware(inbox.Middleware(db)) // or inbox.On(driver.StdSQL(db), inbox.SQLv3Joiner()).New(opts...)
	return inbox.On(driver.StdSQL(db), inbox.SQLv3Joiner()).New(opts...)
}

var (
	_ = readmeCardLine
	_ = readmeUsage
	_ = readmeEventIDPublisher
	_ = readmeEventIDByHand
	_ = readmeLease
	_ = readmeRetryAndPoison
	_ = readmeSQLv3
)

// TestREADME_EverySnippetIsCompiledCode finds each Go snippet of the README and of the guides in docs/guides, line
// for line (spacing aside), in a Go file of this repository: here, or beside the modules the snippet needs
// (pgxinbox, mysqlinbox, prommetrics, the example). Those files compile in the README's test command, so a snippet
// that stops compiling, or that drifts from the code that does, fails here.
func TestREADME_EverySnippetIsCompiledCode(t *testing.T) {
	t.Parallel()
	guides, err := filepath.Glob(filepath.Join("docs", "guides", "*.md"))
	require.NoError(t, err)
	goBlock := regexp.MustCompile("(?s)```go\n(.*?)```")
	var snippets [][]string
	for _, page := range append([]string{"README.md"}, guides...) {
		text, err := os.ReadFile(page)
		require.NoError(t, err)
		found := goBlock.FindAllStringSubmatch(string(text), -1)
		if page == "README.md" {
			require.GreaterOrEqual(t, len(found), 4, "the README's Go snippets")
		}
		snippets = append(snippets, found...)
	}
	require.GreaterOrEqual(t, len(snippets), 12, "the Go snippets of the README and the guides")

	var sources [][]string
	require.NoError(t, filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err == nil {
			sources = append(sources, codeLines(string(src)))
		}
		return err
	}))
	for _, s := range snippets {
		lines := codeLines(s[1])
		found := false
		for _, src := range sources {
			if containsRun(src, lines) {
				found = true
				break
			}
		}
		require.True(t, found, "no Go file holds this snippet of the README or a guide, so nothing compiles it:\n%s", s[1])
	}
}

// codeLines returns the non-blank lines of src with their spacing collapsed.
func codeLines(src string) []string {
	var lines []string
	for _, l := range strings.Split(src, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// containsRun reports whether run appears in lines as consecutive lines.
func containsRun(lines, run []string) bool {
	for i := 0; i+len(run) <= len(lines); i++ {
		if slices.Equal(lines[i:i+len(run)], run) {
			return true
		}
	}
	return false
}

func readmeBatch(router *message.Router, db *sql.DB, sub message.Subscriber, parse func(*message.Message) (int, int)) {
	router.AddMiddleware(inbox.Middleware(db, inbox.WithBatch(time.Millisecond, 64)))
	router.AddConsumerHandler("wallet-credits", "deposits", sub, func(msg *message.Message) error {
		amount, id := parse(msg)                    // work outside the database first: it overlaps with the batch's other handlers
		tx, _ := inbox.TxFromContext(msg.Context()) // waits for the batch's transaction, then holds it
		_, err := tx.ExecContext(msg.Context(), "UPDATE accounts SET balance = balance + $1 WHERE id = $2", amount, id)
		return err
	})
}

var _ = readmeBatch

func guideRetentionCleaner(ctx context.Context, db *sql.DB, logger watermill.LoggerAdapter, metrics observe.Observer) error {
	cleaner, err := inbox.OnSQL(db).NewCleaner(inbox.CleanerConfig{
		CleanupParams: inbox.CleanupParams{Retention: 38 * 24 * time.Hour},
		Window:        31 * 24 * time.Hour, // the longest redelivery of our sources: Pub/Sub seek
	}, inbox.WithLogger(logger), inbox.WithObserver(metrics))
	if err != nil {
		return err
	}
	go cleaner.Run(ctx) // returns when ctx is cancelled
	return nil
}

func guideRetentionPartitions(ctx context.Context, db *sql.DB) error {
	opts := []inbox.MaintenanceOption{inbox.WithIDType(inbox.IDTypeUUID), inbox.WithPartitions(24 * time.Hour)}
	if err := inbox.OnSQL(db).Migrate(ctx, opts...); err != nil { // a new table only: an existing one is not repartitioned
		return err
	}
	cleaner, err := inbox.OnSQL(db).NewCleaner(inbox.CleanerConfig{CleanupParams: inbox.CleanupParams{Retention: 14 * 24 * time.Hour}}, opts...)
	_ = cleaner
	return err
}

func guideFingerprints(db *sql.DB, publisher message.Publisher) (*inbox.Inbox, error) {
	ib, err := inbox.New(db,
		inbox.WithFingerprint(inbox.Fingerprint{
			MetadataKeys: []string{"event_type"}, // besides the payload; none by default
			DeadLetter:   true,                   // default false: skip the conflicting copy
		}),
		inbox.WithDeadLetter(publisher, "billing.dead"),
	)
	return ib, err
}

func guideFingerprintsMigrate(ctx context.Context, db *sql.DB) error {
	err := inbox.OnSQL(db).Migrate(ctx, inbox.WithFingerprint(inbox.Fingerprint{}))
	return err
}

var (
	_ = guideRetentionCleaner
	_ = guideRetentionPartitions
	_ = guideFingerprints
	_ = guideFingerprintsMigrate
)
