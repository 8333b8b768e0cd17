package inbox

import "errors"

// permanentErrors are the sentinels IsPermanent recognises, each with why handling the message again at once
// cannot succeed.
var permanentErrors = []error{
	ErrMissingEventID,     // the message itself lacks its ID: every attempt reads the same metadata
	ErrInvalidEventID,     // the ID cannot be stored faithfully: every attempt reads the same ID
	ErrProducedUnstorable, // the database refused what the handler returned: an attempt ends the same way
	ErrAttemptsExhausted,  // lease mode has already run the handler as often as it may
	ErrNoConsumer,         // the middleware has no consumer name: a fault of the wiring, not of the message
	ErrInvalidOption,      // an option, or the handler's name, cannot work: a fault of the configuration
	ErrSchemaMissing,      // the table is gone: an operator (or the next delivery's migration) must mend it
	ErrSchemaDrift,        // the table has another shape: an operator must mend it
	// The table has no id left for the consumer's new name: only an operator, or another name or table, can help.
	ErrConsumerIDsExhausted,
	ErrStmtOfAnotherDB, // the handler's code gives a batch's transaction what database/sql refuses on it
	ErrNoTx,            // a handler helper found no transaction of its kind: a fault of the wiring, held back like one
}

// IsPermanent reports whether err, as the middleware returns it, says that running the middleware again for the
// same message, at once and in the same process, cannot succeed. The middleware has then already waited the
// reject delay (or dead-lettered the message), so an in-process retry only multiplies that delay, holding up the
// partition or queue behind the message. Give it to Watermill's Retry middleware so it leaves such errors to the
// nack:
//
//	middleware.Retry{
//		MaxRetries:  3,
//		ShouldRetry: func(p middleware.RetryParams) bool { return !inbox.IsPermanent(p.Err) },
//	}
//
// It is true for errors wrapping ErrMissingEventID, ErrInvalidEventID, ErrProducedUnstorable and
// ErrStmtOfAnotherDB (the message can never be applied as it is handled), ErrAttemptsExhausted (lease mode ran out of attempts), and ErrNoConsumer, ErrInvalidOption,
// ErrSchemaMissing, ErrSchemaDrift and ErrConsumerIDsExhausted (the configuration or the schema is at fault, which a
// retry cannot mend; the broker's redelivery finds the table again once it is mended, or migrated by
// WithAutoMigrate). It is false for
// ErrLeaseHeld and ErrLeaseLost, which another holder resolves, for the handler's own errors, and for nil.
func IsPermanent(err error) bool {
	if err == nil {
		return false
	}
	for _, target := range permanentErrors {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
