package inbox

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
)

// subscriberTxs remembers, per handler, whether its messages carry a watermill-sql subscriber's transaction: a
// handler reads from one subscriber, so its first message tells.
type subscriberTxs struct{ carries sync.Map } // handler name → bool

// checkSubscriberTx refuses a message that carries watermill-sql's subscriber transaction when no joiner of the
// Database finds it and WithSubscriberTx(false) was not given. Applying it in a transaction of the inbox's own
// would still apply it once, but would quietly break the one-commit promise the user may count on (the offset, the
// row and the effect together), so the fault is reported, as a configuration's, until the user chooses.
func (i *Inbox) checkSubscriberTx(msg *message.Message) error {
	if i.cfg.lease > 0 || (i.cfg.subscriberTxSet && !i.cfg.subscriberTx) {
		return nil // lease mode never joins; the user chose not to
	}
	ctx := msg.Context()
	handler := message.HandlerNameFromCtx(ctx)
	carries, seen := i.subscriberTxs.carries.Load(handler)
	if !seen {
		carries, _ = i.subscriberTxs.carries.LoadOrStore(handler, carriesSQLSubscriberTx(ctx))
	}
	if !carries.(bool) {
		return nil
	}
	if _, ok := i.db.joined(ctx); ok {
		return nil
	}
	if !i.db.dialect.JoinsSubscriberTx() {
		return fmt.Errorf("%w: handler %s reads from watermill-sql's subscriber, whose transaction the %s inbox "+
			"cannot join; give WithSubscriberTx(false) to apply its messages in a transaction of the inbox's own",
			ErrInvalidOption, quoteShort(handler), i.db.dialect.Name())
	}
	return fmt.Errorf("%w: handler %s reads from watermill-sql's subscriber, and the inbox has no joiner for its "+
		"transaction: build the inbox with sqlv3inbox (watermill-sql v3) or with pgxinbox.SQLv4Joiner (v4) to apply "+
		"each message in that transaction, or give WithSubscriberTx(false) to apply it in one of the inbox's own",
		ErrInvalidOption, quoteShort(handler))
}

// carriesSQLSubscriberTx reports whether ctx holds the transaction watermill-sql's subscriber (v3 or v4) puts in
// a message's context. Its key is of an unexported type that only that package can name; a context's String lists
// the types of its keys and values, which is the one place the key shows without importing the package.
func carriesSQLSubscriberTx(ctx context.Context) bool {
	s := fmt.Sprint(ctx)
	for {
		at := strings.Index(s, ".WithValue(sql.contextKey, ")
		if at < 0 {
			return false
		}
		s = s[at+len(".WithValue(sql.contextKey, "):]
		if strings.HasPrefix(s, "*sql.") || strings.HasPrefix(s, "sql.") {
			return true
		}
	}
}
