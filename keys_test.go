package inbox_test

import (
	"strings"
	"testing"

	"github.com/effectively-once/watermill-inbox/internal/require"

	inbox "github.com/effectively-once/watermill-inbox"
)

func TestIdempotencyKey_DistinctMessagesAndStepsNeverShareAKey(t *testing.T) {
	t.Parallel()
	keys := map[string]string{}
	add := func(what, key string) {
		t.Helper()
		if earlier, ok := keys[key]; ok {
			t.Fatalf("%s and %s share the key %s", earlier, what, key)
		}
		keys[key] = what
	}
	// Names that joining with a separator would confuse.
	add("payments + eu:42", inbox.IdempotencyKey("payments", "eu:42"))
	add("payments:eu + 42", inbox.IdempotencyKey("payments:eu", "42"))
	add("payments + eu + step 42", inbox.StepKey("payments", "eu", "42"))
	add("payments + eu:42 + step charge", inbox.StepKey("payments", "eu:42", "charge"))
	add("payments + eu:42:charge", inbox.IdempotencyKey("payments", "eu:42:charge"))
	add("payments + eu + step 42:charge", inbox.StepKey("payments", "eu", "42:charge"))
	add("payments:eu:42 + empty event", inbox.IdempotencyKey("payments:eu:42", ""))
	add("empty consumer + payments:eu:42", inbox.IdempotencyKey("", "payments:eu:42"))
	add("a + b + empty step", inbox.StepKey("a", "b", ""))
	add("a + b", inbox.IdempotencyKey("a", "b"))
	add("a\x00 + b", inbox.IdempotencyKey("a\x00", "b"))
}

func TestIdempotencyKey_IsStableAcrossVersions(t *testing.T) {
	t.Parallel()
	// Computed once from the documented derivation, outside this package; a key a provider already holds must
	// never change.
	require.Equal(t, "04b7e0f5393359ffe9d8f9b8d0a1013a7d49b14dd6674cf30e08fc16fdfdd2ea", inbox.IdempotencyKey("payments", "eu:42"))
	require.Equal(t, "48976f093284cf6d94eb7a694743b3432c38da4061ca9df90ffeec397c7ab00d", inbox.StepKey("payments", "eu:42", "charge"))
}

func TestIdempotencyKey_FitsProvidersLimitsWhateverTheNames(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 1000)
	for _, key := range []string{inbox.IdempotencyKey(long, long), inbox.StepKey(long, long, long), inbox.IdempotencyKey("", "")} {
		require.Regexp(t, `^[0-9a-f]{64}$`, key)
	}
}
