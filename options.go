package inbox

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/internal/maintain"
	"github.com/effectively-once/watermill-inbox/internal/text"
	"github.com/effectively-once/watermill-inbox/observe"
)

// The options' defaults.
const (
	// DefaultIDMetadataKey is the metadata key the event ID is read from unless WithIDMetadataKey says otherwise.
	DefaultIDMetadataKey = "event_id"

	// DefaultTable is the inbox table's name unless WithTable says otherwise.
	DefaultTable = "watermill_inbox"

	// DefaultMaxIDLength is the longest event ID, in bytes, that the inbox accepts unless WithMaxIDLength says
	// otherwise. A producer's ID is a UUID, a ULID or a short composite key; anything much longer is a payload
	// put in the wrong place, and every byte of it is stored in the primary key index for the whole retention window.
	DefaultMaxIDLength = 255

	// DefaultMaxAttempts is how many times lease mode runs a handler for one message before dead-lettering it,
	// unless WithMaxAttempts says otherwise.
	DefaultMaxAttempts = 5

	// DefaultRejectDelay is how long the middleware waits before nacking a message it cannot apply (no or invalid
	// event ID) when no dead-letter publisher is configured, unless WithRejectDelay says otherwise. It is also the
	// wait before a nack while the inbox cannot apply any message: its table missing or of another shape, or a
	// handler name that cannot be a consumer name.
	DefaultRejectDelay = 30 * time.Second

	// DefaultBatchConcurrency is how many batches of one consumer let their handlers use the transaction at once
	// unless WithBatchConcurrency says otherwise: one, so that batches of one process never wait for one another's row
	// locks. (Later batches meanwhile claim their messages and start their handlers, whose first statement waits for
	// the batch's turn; a batch that commits has given its turn up.) A batch holds the locks of every row its handlers
	// wrote until its one commit, and its handlers write in the order they reach the transaction: two batches whose
	// handlers update the same rows (a few hot accounts) deadlock, which PostgreSQL breaks only after
	// deadlock_timeout (1 s), failing one handler; docs/results/performance.md measures what that costs. A batch
	// holds the turn until its last handler returns, except that once it has held it for 10 ms (or four times the
	// handlers' usual work before their first statement, when that is longer) it gives it up as soon as none of its
	// members uses or waits for its connection while some still work outside the database; a message that goes alone
	// gives it up at that bound. One handler that works for seconds before it writes so holds up its own batch's
	// acks, not the consumer.
	DefaultBatchConcurrency = 1
)

// The fixed values: the limits options and messages are held to, and a dead letter's metadata key.
const (
	// MaxConsumerLength is the longest consumer name, in bytes, that the inbox accepts, from WithConsumer or from a
	// handler's name. The consumer and the event ID share each primary key entry, and PostgreSQL refuses a B-tree
	// entry over 2704 bytes: 512 bytes of consumer, 2000 of ID (the most WithMaxIDLength allows) and their headers
	// stay under that even when neither compresses.
	MaxConsumerLength = 512

	// MaxBatchSize is the most messages WithBatch lets share one transaction. Each runs in a savepoint, a
	// subtransaction, and PostgreSQL keeps the first 64 of a transaction in a per-backend cache; past that every
	// snapshot in the database has to look them up elsewhere, which slows every session, not only the inbox's.
	MaxBatchSize = 64

	// MaxStoredErrorBytes is the most bytes of an attempt's error that lease mode stores with the message (the text
	// Lease.PreviousError returns and the CLI's stats show). A longer error is cut at a character boundary and ends in
	// "…". Before it is stored, bytes that are not valid UTF-8 and NUL bytes, which PostgreSQL's text type refuses,
	// each become U+FFFD: an error text cut in the middle of a character by a provider must not keep the lease from
	// being released.
	MaxStoredErrorBytes = 2048

	// PartitionsAhead is how far past the database's clock Migrate and each cleanup round keep partitions created,
	// at least two periods: IDs of a producer whose clock runs ahead land in their partition, and a Cleaner that
	// misses rounds for a day still finds them there.
	PartitionsAhead = maintain.Ahead

	// AttemptsKey is the metadata key that holds, on a message lease mode dead-lettered, how many times the handler ran.
	// The other keys of a dead letter are those of Watermill's PoisonQueue middleware (middleware.ReasonForPoisonedKey,
	// PoisonedTopicKey, PoisonedHandlerKey, PoisonedSubscriberKey), so tools and people that already read poison queues
	// read the inbox's dead letters the same way.
	AttemptsKey = "attempts_poisoned"
)

// IDType is the column type the inbox stores event IDs in.
type IDType string

const (
	// IDTypeText stores event IDs as text: any ID of up to the maximum length. The default.
	IDTypeText IDType = "text"
	// IDTypeUUID stores event IDs as uuid: 16 bytes instead of 37 for a UUID's text, and a smaller index, for
	// producers whose IDs are all UUIDs (with UUIDv7, the index also stays compact: new keys go to its right
	// edge). An ID that is not a UUID is refused like any invalid ID: dead-lettered, or nacked after a delay.
	IDTypeUUID IDType = "uuid"
)

// Option configures an Inbox: New and Middleware take it (and Database.New, and the pgxinbox and mysqlinbox
// modules' New and Middleware). The options are checked together, once, when the Inbox is built: a conflict
// between two of them is an error wrapping ErrInvalidOption there, never a surprise per message.
type Option interface{ applyInbox(*config) }

// MaintenanceOption configures a maintenance call of a Database: Migrate, Migrations, Cleanup, NewCleaner,
// ReadStats, Forget and Remembers. Only the options that say which table and of what shape, and where the call
// reports, are maintenance options (see SharedOption): one that shapes the middleware only, such as WithBatch,
// does not compile there. Each call checks its options together, before it touches the database.
type MaintenanceOption interface{ applyMaintenance(*config) }

// SharedOption is an option that both an Inbox and the maintenance calls take: WithTable, WithIDType,
// WithPartitions, WithLogger and WithObserver. Give the maintenance calls the same table and shape options as the
// middleware, so that they work on the table it uses.
type SharedOption interface {
	Option
	MaintenanceOption
}

// inboxOption is an Option that only an Inbox takes.
type inboxOption func(*config)

func (o inboxOption) applyInbox(c *config) { o(c) }

// sharedOption is an Option and a MaintenanceOption alike.
type sharedOption func(*config)

func (o sharedOption) applyInbox(c *config)       { o(c) }
func (o sharedOption) applyMaintenance(c *config) { o(c) }

type config struct {
	consumer     string
	idKey        string
	useUUID      bool
	table        string
	dlqPublisher message.Publisher
	dlqTopic     string
	dlqSet       bool
	logger       watermill.LoggerAdapter
	loggerSet    bool      // WithLogger was given, nil included
	logOutput    io.Writer // where the default logger writes: os.Stderr, or a test's buffer
	maxIDLength  int
	rejectDelay  time.Duration
	subscriberTx bool
	// subscriberTxSet is true when WithSubscriberTx was given.
	subscriberTxSet bool
	observer        observe.Observer
	leaseObserver   observe.LeaseObserver // observer, when it is one; NopObserver otherwise
	lease           time.Duration
	maxAttempts     int
	idType          IDType
	autoMigrate     bool
	batchSize       int           // 0: batch mode off
	batchWait       time.Duration // how long a batch waits to fill while others run
	batchRunning    int           // batches in flight at once
	batchRunningSet bool
	batchSet        bool
	partitionPeriod time.Duration // 0: the inbox table is not managed as partitions
	claimAtCommit   bool          // the claim goes with COMMIT (WithClaimAtCommit)
	fingerprint     *Fingerprint  // nil: no fingerprints (WithFingerprint)

	// Whether the option was given, for the options whose zero value is also a choice.
	consumerSet    bool
	maxAttemptsSet bool
	idTypeSet      bool
}

// WithConsumer scopes the inbox to a fixed consumer name. By default each message is scoped to the name of the
// Watermill handler that runs it, so two handlers of one topic each apply a message once. Give a fixed name when
// a handler is renamed but must keep its history, or when several handlers must share one history. The name must
// be valid UTF-8 of 1 to MaxConsumerLength (512) bytes, without NUL bytes. A handler's name used in its place is
// checked the same way, per message: a message whose handler has no usable name is nacked after the reject delay
// with an error wrapping ErrInvalidOption, and never dead-lettered.
func WithConsumer(name string) Option {
	return inboxOption(func(c *config) { c.consumer, c.consumerSet = name, true })
}

// WithBatch turns on batch mode (group commit) in transaction mode: handler calls that are in flight at the same
// time (several partitions, an AMQP prefetch, a NATS ack window, a GoChannel) share one transaction of up to
// maxSize messages (1 to MaxBatchSize). Their IDs are claimed in one statement; each handler runs in a savepoint of
// its own, so a failing or panicking handler rolls back only its effect and its claim, and only its message is
// nacked; the batch commits once, and then every other handler call returns and the router acks. A message never
// waits when no batch is running (it then goes alone, as without batching); while batches run, a new one waits up
// to maxWait (0 or more) to fill, and for the batch before it to claim its messages. It is full at maxSize, or at
// half the consumer's messages in flight when that is 16 or more: the other half are in the batch before it, and
// two batches so take turns. It does not wait to fill once the recent handlers have worked longer
// than maxWait before their first use of the transaction: their work overlaps the batches before them, and a
// fuller batch would only start it later.
//
// The transaction is one connection, so handlers take it one at a time: TxFromContext (and pgxinbox's) waits for
// it and holds it until the handler returns. Call it when the handler is ready to write, after any slow work
// outside the database, so that that work overlaps; a handler that holds the transaction while it calls out holds
// up the whole batch. The batch commits when its last handler returns: a handler that works long delays the acks
// of its batch, and after a bound the batches after it go on (see DefaultBatchConcurrency). A duplicate ends as
// without batching, acked with the messages its first application produced; on PostgreSQL, MySQL and MariaDB the
// batch's claim and one statement in its transaction end every duplicate of the batch, with no transaction of its
// own.
//
// A message joined to watermill-sql's subscriber transaction (WithSubscriberTx, on by default) never shares a
// batch: it runs alone in that transaction, as without batching, since the subscriber commits it; only the
// messages that carry no subscriber's transaction are batched. Lease mode refuses this option, and so does
// WithClaimAtCommit; WithBatchConcurrency needs it. New and Middleware take it, no maintenance call does.
func WithBatch(maxWait time.Duration, maxSize int) Option {
	return inboxOption(func(c *config) { c.batchWait, c.batchSize, c.batchSet = maxWait, maxSize, true })
}

// WithClaimAtCommit sends the claim after the handler, in one round trip with COMMIT, instead of before it: on pgx v5
// (pgxinbox, over a *pgxpool.Pool, a *pgxpool.Conn or a *pgx.Conn) a message whose handler runs one statement then
// costs two round trips (BEGIN with that statement; the claim with COMMIT) instead of three, and the transaction is
// not open while the handler works before its first statement.
//
// Use it only for handlers whose every effect is on the inbox's transaction. The handler runs before the inbox
// knows whether the message is a copy: a copy's handler runs, and its claim then finds the row, fails, and rolls
// the transaction back with the handler's effect; the message then goes the usual way, claim first, which skips it
// as a duplicate (and sends the messages it produced the first time again). An effect outside the transaction (a
// call out, a publish of the handler's own, an e-mail) would happen for every copy. A claim that fails for any
// other reason goes the usual way too. Racing copies both run their handlers, and one commits.
//
// A copy thus costs a handler run and a rolled-back transaction more than without the option, so it pays where
// copies are rare. It applies to the transactions the inbox begins and commits; a message joined to watermill-sql's
// subscriber transaction is claimed first as usual. New refuses it with lease mode and batch mode, and on a pool
// that cannot send a statement with COMMIT (database/sql's drivers, where it would save nothing).
func WithClaimAtCommit() Option { return inboxOption(func(c *config) { c.claimAtCommit = true }) }

// WithBatchConcurrency lets the handlers of n batches of one consumer use their transactions at once instead of
// DefaultBatchConcurrency (1). Raise it when handlers write rows that concurrent messages rarely share: more
// batches overlap their round trips, but batches that share rows deadlock (see DefaultBatchConcurrency). Up to 7
// more batches may hold a transaction, and so a connection, open while they wait for their turn, and run faster
// for it with short handlers: a pool of more than n+7 connections lets them. On a pool whose limit the inbox can
// read (database/sql's SetMaxOpenConns, a *pgxpool.Pool's MaxConns) fewer wait, so that two connections stay free
// for what handlers take from the pool outside their transaction; on any other pool, give it n+9 or more. It needs
// WithBatch: without it, New refuses it.
func WithBatchConcurrency(n int) Option {
	return inboxOption(func(c *config) { c.batchRunning, c.batchRunningSet = n, true })
}

// WithIDMetadataKey reads the event ID from this metadata key instead of DefaultIDMetadataKey ("event_id").
func WithIDMetadataKey(key string) Option { return inboxOption(func(c *config) { c.idKey = key }) }

// WithMessageUUIDAsID uses Watermill's message UUID as the event ID instead of a metadata key. Use it only when the
// producer sets the UUID itself and keeps it across retries and relays: a UUID that watermill generates on each
// publish deduplicates nothing.
func WithMessageUUIDAsID() Option { return inboxOption(func(c *config) { c.useUUID = true }) }

// WithTable stores the inbox in this table instead of DefaultTable ("watermill_inbox"). The name must be a plain
// lower-case identifier of at most 48 characters (letters, digits, underscores; not starting with a digit); use
// the connection's search_path to place it in another schema. New, Middleware and every maintenance call take it:
// give them all the same name.
func WithTable(name string) SharedOption { return sharedOption(func(c *config) { c.table = name }) }

// WithDeadLetter publishes messages that cannot be applied (no event ID, an invalid one) to topic, with the reason
// in Watermill's poison-queue metadata keys, and then acks them. Without it such messages are nacked after the
// reject delay and logged at error, so they are kept but block their partition until a dead-letter publisher is
// configured; the first such message of an Inbox also logs, once, that this option is missing.
func WithDeadLetter(pub message.Publisher, topic string) Option {
	return inboxOption(func(c *config) { c.dlqPublisher, c.dlqTopic, c.dlqSet = pub, topic, true })
}

// WithLogger logs through l instead of the default logger, which writes errors, and only errors, to standard
// error: those that hold messages back (a message without a usable event ID, a schema the inbox cannot use, a
// failed commit) and those of the cleanup and the retention alarm. Give l to see the inbox's debug and info lines
// too (skipped duplicates, migrations, lease takeovers); give watermill.NopLogger{}, or nil, to discard everything.
// New and Middleware take it, and so do Migrate, Cleanup, NewCleaner and Forget, which log what they did.
func WithLogger(l watermill.LoggerAdapter) SharedOption {
	return sharedOption(func(c *config) { c.logger, c.loggerSet = l, true })
}

// defaultLogger is the logger of an inbox built without WithLogger: errors only, as text, to out. An inbox that
// holds messages back must say so to someone; its debug and info lines would drown that in a busy consumer.
func defaultLogger(out io.Writer) watermill.LoggerAdapter {
	return watermill.NewSlogLogger(slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelError})))
}

// WithMaxIDLength accepts event IDs of up to n bytes instead of DefaultMaxIDLength (255). n must be between 1 and
// 2000; PostgreSQL cannot index a key much longer than that.
func WithMaxIDLength(n int) Option { return inboxOption(func(c *config) { c.maxIDLength = n }) }

// WithRejectDelay waits d before nacking an unusable message when no dead-letter publisher is configured, instead
// of DefaultRejectDelay (30 s). It keeps a poison message from spinning in a hot redelivery loop. d must be
// positive; the wait ends early when the message's context is cancelled.
func WithRejectDelay(d time.Duration) Option {
	return inboxOption(func(c *config) { c.rejectDelay = d })
}

// WithSubscriberTx decides whether the inbox joins the transaction of watermill-sql's subscriber when the message
// carries one (the default, true), through the Database's joiners (SQLv3Joiner for v3, which New and Middleware
// join by default; pgxinbox.SQLv4Joiner for v4). Turn it off when that subscriber reads from another database than
// the inbox's: the inbox then opens its own transaction on its own database. With it on, a message is held back
// with ErrInvalidOption rather than applied outside the transaction it carries when no joiner finds that
// transaction, when the transaction is on another database than the inbox's, and when it is of another client
// library's than the inbox's (watermill-sql v4 over pgx under an inbox over database/sql), whose handlers could not
// reach it.
//
// A joined message never shares a batch (WithBatch): the subscriber commits its transaction, so the inbox cannot
// commit it with others. In batch mode a message that carries a subscriber's transaction is applied alone in that
// transaction, as without batching, and only the messages that carry none are batched; to batch every message
// of watermill-sql's subscriber, turn this option off: the subscriber then commits its offsets apart from the
// inbox's rows, which still apply each message once. Lease mode (WithLease) never joins: it commits its claim
// before the handler runs.
func WithSubscriberTx(join bool) Option {
	return inboxOption(func(c *config) { c.subscriberTx, c.subscriberTxSet = join, true })
}

// WithIDType creates the message_id column of a new inbox table as t instead of IDTypeText, in Migrate and when
// the middleware creates the table itself (WithAutoMigrate). It does not change the type of a table that exists.
// The middleware needs no such option: before its first message it reads the column's type from the table, and
// stores each ID in that column's form (a UUID as lower-case canonical text, however it was spelled; an ID that is
// not a UUID is refused like any invalid ID). Given to New or Middleware, t must match the existing table: a
// mismatch is reported per message as an error wrapping ErrInvalidOption, and the message nacked after the reject
// delay. Migrate and Migrations read it; the other maintenance calls take it so that one list of options serves
// them all, and check only that WithPartitions has it.
func WithIDType(t IDType) SharedOption {
	return sharedOption(func(c *config) { c.idType, c.idTypeSet = t, true })
}

// WithAutoMigrate decides whether the middleware creates or upgrades the inbox's tables itself (the default, true).
// Before its first message it checks the schema; when the inbox table is missing, or lacks only what a newer version
// of the inbox adds, it runs Migrate once with the same options, under Migrate's advisory lock, so that many
// instances may start at once. Turn it off when migrations are applied by other means: a missing table is then an
// error wrapping ErrSchemaMissing, and each message is nacked after the reject delay until the table exists, never
// dead-lettered. Either way, tables of another shape are reported as ErrSchemaDrift and left as they are.
func WithAutoMigrate(on bool) Option { return inboxOption(func(c *config) { c.autoMigrate = on }) }

// WithLease switches the middleware to lease mode, for side effects outside the database such as a payment call.
// Instead of one transaction around the handler, a short transaction of its own records the message as
// 'processing' with a lease of d by the database clock; the handler calls out with the idempotency key from
// LeaseFromContext; the row is then marked 'done', only if the lease is still the handler's. A copy that arrives
// while the lease is live is nacked after a wait of at most a second, to look again; once the lease has ended,
// the next copy takes over. Choose d longer
// than the handler's slowest call, or extend it from the handler with Lease.Extend. d must be between 10 ms and
// 24 hours. TxFromContext reports no transaction in this mode.
func WithLease(d time.Duration) Option { return inboxOption(func(c *config) { c.lease = d }) }

// WithMaxAttempts runs a lease-mode handler at most n times for one message instead of DefaultMaxAttempts (5),
// then dead-letters it with its attempts and last error and marks the row 'failed', so later copies are acked
// without running. n must be at least 1, and the option needs WithLease.
func WithMaxAttempts(n int) Option {
	return inboxOption(func(c *config) { c.maxAttempts, c.maxAttemptsSet = n, true })
}

// WithObserver reports what the inbox does to o, for metrics and tracing, instead of to NopObserver: claims and
// their outcome, commits with their duration, skipped duplicates, dead letters, nacks without a dead-letter topic,
// cleaned rows, and to an o that is also a LeaseObserver, lease takeovers and lost leases. See Observer. New and
// Middleware take it, and so do Cleanup and NewCleaner, which report the rows they delete (RowsCleaned).
func WithObserver(o observe.Observer) SharedOption {
	return sharedOption(func(c *config) { c.observer = o })
}

// tableNamePattern admits only names that mean the same quoted or unquoted, so the shipped SQL files and the
// queries agree on the table whatever tool applies them.
var tableNamePattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`)

// newConfig checks the options of an Inbox together and fills in the defaults.
func newConfig(opts []Option) (config, error) { return buildConfig(opts, Option.applyInbox) }

// newMaintenanceConfig does for a maintenance call what newConfig does for an Inbox: the options it cannot take
// keep their defaults, so the checks of the middleware's options find nothing to refuse.
func newMaintenanceConfig(opts []MaintenanceOption) (config, error) {
	return buildConfig(opts, MaintenanceOption.applyMaintenance)
}

func buildConfig[O any](opts []O, apply func(O, *config)) (config, error) {
	c := config{
		idKey:        DefaultIDMetadataKey,
		table:        DefaultTable,
		logOutput:    os.Stderr,
		maxIDLength:  DefaultMaxIDLength,
		rejectDelay:  DefaultRejectDelay,
		subscriberTx: true,
		idType:       IDTypeText,
		autoMigrate:  true,
		batchRunning: DefaultBatchConcurrency,
	}
	for n, opt := range opts {
		if any(opt) == nil {
			return c, fmt.Errorf("%w: option %d of %d is nil", ErrInvalidOption, n+1, len(opts))
		}
		apply(opt, &c)
	}
	switch {
	case !c.loggerSet:
		c.logger = defaultLogger(c.logOutput)
	case c.logger == nil:
		c.logger = watermill.NopLogger{}
	}
	if !c.maxAttemptsSet && c.lease > 0 {
		c.maxAttempts = DefaultMaxAttempts
	}
	if c.observer == nil {
		c.observer = observe.NopObserver{}
	}
	c.leaseObserver, _ = c.observer.(observe.LeaseObserver)
	if c.leaseObserver == nil {
		c.leaseObserver = observe.NopObserver{}
	}
	return c, c.validate()
}

func (c config) validate() error {
	if c.consumerSet {
		if problem := text.Problem(c.consumer, MaxConsumerLength); problem != "" {
			return fmt.Errorf("%w: WithConsumer(%s): %s", ErrInvalidOption, text.Quote(c.consumer), problem)
		}
	}
	switch {
	case !c.useUUID && c.idKey == "":
		return fmt.Errorf("%w: WithIDMetadataKey: the key is empty", ErrInvalidOption)
	case !tableNamePattern.MatchString(c.table):
		return fmt.Errorf("%w: WithTable(%q): want a lower-case identifier matching %s", ErrInvalidOption, c.table, tableNamePattern)
	case c.dlqSet && c.dlqPublisher == nil:
		return fmt.Errorf("%w: WithDeadLetter: the publisher is nil", ErrInvalidOption)
	case c.dlqSet && c.dlqTopic == "":
		return fmt.Errorf("%w: WithDeadLetter: the topic is empty", ErrInvalidOption)
	case c.idType != IDTypeText && c.idType != IDTypeUUID:
		return fmt.Errorf("%w: WithIDType(%q): want IDTypeText or IDTypeUUID", ErrInvalidOption, c.idType)
	case c.maxIDLength < 1 || c.maxIDLength > 2000:
		return fmt.Errorf("%w: WithMaxIDLength(%d): want 1 to 2000 bytes", ErrInvalidOption, c.maxIDLength)
	case c.lease != 0 && (c.lease < 10*time.Millisecond || c.lease > 24*time.Hour):
		return fmt.Errorf("%w: WithLease(%s): want 10ms to 24h", ErrInvalidOption, c.lease)
	case c.lease == 0 && c.maxAttemptsSet:
		return fmt.Errorf("%w: WithMaxAttempts: attempts are counted in lease mode only; add WithLease", ErrInvalidOption)
	case c.lease > 0 && c.maxAttempts < 1:
		return fmt.Errorf("%w: WithMaxAttempts(%d): want at least 1", ErrInvalidOption, c.maxAttempts)
	case c.batchSet && (c.batchSize < 1 || c.batchSize > MaxBatchSize):
		return fmt.Errorf("%w: WithBatch(%s, %d): want a size of 1 to %d", ErrInvalidOption, c.batchWait, c.batchSize, MaxBatchSize)
	case c.batchSet && c.batchWait < 0:
		return fmt.Errorf("%w: WithBatch(%s, %d): want a wait of 0 or more", ErrInvalidOption, c.batchWait, c.batchSize)
	case c.batchSet && c.lease > 0:
		return fmt.Errorf("%w: WithBatch: lease mode runs each message alone; leave out WithBatch or WithLease", ErrInvalidOption)
	case c.claimAtCommit && c.lease > 0:
		return fmt.Errorf("%w: WithClaimAtCommit: lease mode records its claim before the call out; leave out one of the two", ErrInvalidOption)
	case c.claimAtCommit && c.fingerprint != nil:
		return fmt.Errorf("%w: WithClaimAtCommit: a fingerprint is stored with the claim, which this option sends after the handler; leave out one of the two", ErrInvalidOption)
	case c.fingerprint != nil && c.fingerprint.DeadLetter && c.dlqPublisher == nil:
		return fmt.Errorf("%w: WithFingerprint: Fingerprint.DeadLetter needs WithDeadLetter to name where conflicts go", ErrInvalidOption)
	case c.claimAtCommit && c.batchSet:
		return fmt.Errorf("%w: WithClaimAtCommit: batch mode claims its messages together, first; leave out one of the two", ErrInvalidOption)
	case c.batchRunningSet && !c.batchSet:
		return fmt.Errorf("%w: WithBatchConcurrency(%d) without WithBatch: it sets how many batches run at once; "+
			"add WithBatch or leave it out", ErrInvalidOption, c.batchRunning)
	case c.batchRunning < 1:
		return fmt.Errorf("%w: WithBatchConcurrency(%d): want at least 1", ErrInvalidOption, c.batchRunning)
	case c.partitionPeriod != 0 && (c.partitionPeriod < time.Minute || c.partitionPeriod%time.Minute != 0):
		return fmt.Errorf("%w: WithPartitions(%s): want whole minutes, at least one", ErrInvalidOption, c.partitionPeriod)
	case c.partitionPeriod != 0 && c.idType != IDTypeUUID:
		return fmt.Errorf("%w: WithPartitions: partitions are ranges of UUIDv7 event IDs; add WithIDType(IDTypeUUID)", ErrInvalidOption)
	case c.rejectDelay <= 0:
		return fmt.Errorf("%w: WithRejectDelay(%s): want a positive duration", ErrInvalidOption, c.rejectDelay)
	}
	return nil
}

// Fingerprint configures WithFingerprint.
type Fingerprint struct {
	// MetadataKeys names the metadata whose values count in a message's fingerprint besides its payload, in this
	// order; none by default. Name what tells two events apart (an event type, a schema version), never what each
	// copy gets anew (a trace ID, a delivery count): that would make every copy a conflict.
	MetadataKeys []string
	// DeadLetter dead-letters a conflicting copy, with ErrFingerprintConflict as its reason, instead of skipping
	// it, the default. It needs WithDeadLetter.
	DeadLetter bool
}

// WithFingerprint catches a producer that reuses an event ID for another event: an ID built from an order number
// and sent for "paid" and then "refunded", a counter reset by a restore. The inbox stores with each row a short
// hash (8 bytes of SHA-256) of the message's payload and of the metadata f names, and compares it with every later
// copy's. A copy that differs is a conflict: it is logged at ERROR with both fingerprints, reported to
// Observer.FingerprintConflict (the prommetrics and otelinbox observers count it) and skipped, or dead-lettered
// when f says so. Off by default.
//
// The fingerprint needs a column of its own, which Migrate adds when it is given this option, without rewriting
// the table (so does the middleware's first message, unless WithAutoMigrate(false)); docs/storage.md measures
// what it costs per row. Rows written before it have none and are never a conflict. It costs one statement per
// claimed message, in the claim's transaction, and one per copy of an applied message. It works in transaction,
// batch and lease mode, and in a joined subscriber's transaction; not with WithClaimAtCommit, whose claim goes
// after the handler.
func WithFingerprint(f Fingerprint) SharedOption {
	f.MetadataKeys = slices.Clone(f.MetadataKeys)
	return sharedOption(func(c *config) { c.fingerprint = &f })
}
