package fingerprint

import (
	"testing"
)

func md(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func TestOfTellsMessagesApartAndCopiesAlike(t *testing.T) {
	paid := Of([]byte(`{"order":7}`), md(map[string]string{"type": "paid"}), []string{"type"})
	if len(paid) != Size {
		t.Fatalf("len = %d, want %d", len(paid), Size)
	}
	if again := Of([]byte(`{"order":7}`), md(map[string]string{"type": "paid", "trace": "x"}), []string{"type"}); String(again) != String(paid) {
		t.Errorf("a copy with other unnamed metadata sums to %s, want %s", String(again), String(paid))
	}
	for name, other := range map[string][]byte{
		"another value of a named key": Of([]byte(`{"order":7}`), md(map[string]string{"type": "refunded"}), []string{"type"}),
		"another payload":              Of([]byte(`{"order":8}`), md(map[string]string{"type": "paid"}), []string{"type"}),
		"a byte moved into the value":  Of([]byte(`{"order":7`), md(map[string]string{"type": "}paid"}), []string{"type"}),
		"no named key":                 Of([]byte(`{"order":7}`), md(nil), nil),
	} {
		if !Conflicts(paid, other) {
			t.Errorf("%s: fingerprint %s does not conflict with %s", name, String(other), String(paid))
		}
	}
}

func TestARowWithoutAFingerprintConflictsWithNothing(t *testing.T) {
	f := Of([]byte("a"), md(nil), nil)
	if Conflicts(nil, f) || Conflicts(f, nil) || Conflicts(f, f) {
		t.Error("an unknown fingerprint, or an equal one, was taken for a conflict")
	}
	if String(nil) != "none" {
		t.Errorf("String(nil) = %q", String(nil))
	}
}
