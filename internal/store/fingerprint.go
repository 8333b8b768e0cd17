package store

import (
	"context"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// SaveFingerprint stores msg's fingerprint with the row tx claimed, when WithFingerprint is on.
func (s *Store) SaveFingerprint(ctx context.Context, tx driver.Executor, consumer, id string, f []byte) error {
	if f == nil {
		return nil
	}
	cid, err := s.ConsumerID(ctx, consumer)
	if err != nil {
		return err
	}
	if s.caps.fingerprints == nil {
		return errNoFingerprints(s.d)
	}
	err = s.caps.fingerprints.SaveFingerprint(ctx, tx, dialect.FingerprintParams{Table: s.table, Consumer: consumer,
		ConsumerID: cid, ID: id, Fingerprint: f})
	if err != nil {
		return s.wrap("store fingerprint", consumer, id, err)
	}
	return nil
}

// ReadFingerprint returns the fingerprint stored with the row of (consumer, id), read in q.
func (s *Store) ReadFingerprint(ctx context.Context, q driver.Executor, consumer, id string) ([]byte, error) {
	cid, err := s.ConsumerID(ctx, consumer)
	if err != nil {
		return nil, err
	}
	if s.caps.fingerprints == nil {
		return nil, errNoFingerprints(s.d)
	}
	f, err := s.caps.fingerprints.ReadFingerprint(ctx, q, dialect.RowParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id})
	if err != nil {
		return nil, s.wrap("read fingerprint", consumer, id, err)
	}
	return f, nil
}
