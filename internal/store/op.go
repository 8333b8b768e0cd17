package store

// op is a statement of the Store's on a message's path, as its errors name it and as wrap reads them: what a
// statement's failure may be blamed on depends on what the statement is.
type op uint8

const (
	opClaim op = iota
	opClaimLease
	opBatchClaim
	opGiveBack
	opReadProduced
	opStoreProduced
	opFinish
	opTakeOver
	opReadRows
	opStoreFingerprint
	opReadFingerprint
	opExtendLease // the lease holder's writes, in LeaseOp's order
	opCompleteLease
	opFailLease
	opReleaseLease
	opCount // not a statement: the number of ops
)

var opNames = [opCount]string{
	"claim", "claim lease", "batch claim", "give back claim", "read produced messages", "store produced messages",
	"finish claim", "take over lease-mode row", "read rows", "store fingerprint", "read fingerprint",
	"extend lease", "complete lease", "mark failed", "release lease",
}

// String names the statement, for errors and logs.
func (o op) String() string { return opNames[o] }

// sendsIDFirst reports whether o is a message's claim, the first statement to send its event ID: only its refusal
// may be blamed on the ID. Every later statement sends an ID a claim accepted.
func (o op) sendsIDFirst() bool { return o == opClaim || o == opClaimLease }

// claimsInTx reports whether o is the claim of a message's transaction, whose lost lock (a serialization failure,
// a lock timeout) means another copy holds the row: ErrClaimLostLock.
func (o op) claimsInTx() bool { return o == opClaim }
