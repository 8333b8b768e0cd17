package inbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// A payment consumer in lease mode is SIGKILLed in the middle of its call to a payment provider. The provider is a
// stand-in on loopback that honours the Idempotency-Key header the way payment APIs do: a key it has seen gets the
// first call's answer back, and no second charge.

const paymentProcessEnv = "INBOX_TEST_PAYMENT_PROCESS"

// paymentProvider charges once per Idempotency-Key. With hangAt set, the first request to that path never
// answers: it signals hung and waits for the caller to die.
type paymentProvider struct {
	hangAt string // "/prepare": before the charge call; "/charges": after the charge landed
	hung   chan struct{}

	mu        sync.Mutex
	byKey     map[string]string // Idempotency-Key -> charge ID
	hangOnce  sync.Once
	calls     atomic.Int64 // requests to /charges
	effective atomic.Int64 // charges made
}

func newPaymentProvider(t *testing.T, hangAt string) (*paymentProvider, string) {
	p := &paymentProvider{hangAt: hangAt, hung: make(chan struct{}), byKey: map[string]string{}}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

func (p *paymentProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hang := func() {
		p.hangOnce.Do(func() {
			close(p.hung)
			<-r.Context().Done() // the client process is killed; nothing is written
		})
	}
	switch r.URL.Path {
	case "/prepare":
		if p.hangAt == "/prepare" {
			hang()
		}
		w.WriteHeader(http.StatusNoContent)
	case "/charges":
		p.calls.Add(1)
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			http.Error(w, "Idempotency-Key required", http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		id, replayed := p.byKey[key]
		if !replayed {
			id = fmt.Sprintf("ch_%d", p.effective.Add(1))
			p.byKey[key] = id
		}
		p.mu.Unlock()
		if p.hangAt == "/charges" {
			hang() // the charge landed; its answer never reaches the consumer
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "replayed": replayed})
	default:
		http.NotFound(w, r)
	}
}

func TestLease_ConsumerKilledMidCallIsChargedExactlyOnce(t *testing.T) {
	t.Parallel()
	for name, hangAt := range map[string]string{
		"KilledAfterTheProviderCharged":     "/charges",
		"KilledBeforeTheProviderGotTheCall": "/prepare",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			provider, url := newPaymentProvider(t, hangAt)
			b := newBundle(t)
			topic := newSQLTopic(t, b.db)
			require.NoError(t, newSQLPublisher(t, b.db).Publish(topic, newMsg("pay-1")))

			first := paymentProcess(t, b, topic, url)
			require.NoError(t, first.Start())
			select {
			case <-provider.hung:
			case <-time.After(30 * time.Second):
				_ = first.Process.Kill()
				t.Fatalf("the first consumer never reached the provider:\n%s", first.Stdout)
			}
			require.NoError(t, first.Process.Kill()) // SIGKILL: no defer, no release, no 'done'
			_ = first.Wait()
			row := b.leaseRow(t, "pay-1")
			require.Equal(t, "processing", row.state)
			require.Equal(t, 1, row.attempts)

			second := paymentProcess(t, b, topic, url)
			require.NoError(t, second.Run(), "the second consumer takes over after the lease expires:\n%s", second.Stdout)

			require.EqualValues(t, 1, provider.effective.Load(), "charged exactly once")
			row = b.leaseRow(t, "pay-1")
			require.Equal(t, "done", row.state)
			require.Equal(t, 2, row.attempts)
			if hangAt == "/charges" {
				require.EqualValues(t, 2, provider.calls.Load(), "called twice with one key; the provider replayed the first charge")
			} else {
				require.EqualValues(t, 1, provider.calls.Load())
			}
		})
	}
}

func paymentProcess(t *testing.T, b *testBundle, topic, providerURL string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		paymentProcessEnv+"=1",
		"INBOX_TEST_TOPIC="+topic,
		"INBOX_TEST_TABLE="+b.Table,
		"INBOX_TEST_PROVIDER="+providerURL,
	)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	t.Cleanup(func() {
		if cmd.Process != nil && cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	return cmd
}

// runPaymentProcess is the child's main: a lease-mode consumer that charges each message through the provider
// with the lease's idempotency key, and exits once one message is done and acked.
func runPaymentProcess() int {
	topic, table, providerURL := os.Getenv("INBOX_TEST_TOPIC"), os.Getenv("INBOX_TEST_TABLE"), os.Getenv("INBOX_TEST_PROVIDER")
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "payment process:", err); return 1 }
	db, err := sql.Open(testDriver, testDSN())
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	logger := watermill.NewStdLoggerWithOut(os.Stdout, false, false)
	sub, err := wsql.NewSubscriber(db, sqlSubscriberConfig("payments"), logger)
	if err != nil {
		return fail(err)
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		return fail(err)
	}
	router.AddMiddleware(inbox.Middleware(db, inbox.WithTable(table), inbox.WithLease(time.Second), inbox.WithLogger(logger)))
	var done atomic.Bool
	router.AddConsumerHandler("wallet-credits", topic, sub, func(msg *message.Message) error {
		lease, ok := inbox.LeaseFromContext(msg.Context())
		if !ok {
			return errors.New("no lease in the handler's context")
		}
		if err := post(msg.Context(), providerURL+"/prepare", ""); err != nil {
			return err
		}
		if err := post(msg.Context(), providerURL+"/charges", lease.IdempotencyKey()); err != nil {
			return err
		}
		done.Store(true)
		go func() {
			<-msg.Acked()
			time.Sleep(300 * time.Millisecond) // lets the subscriber commit the ack
			_ = router.Close()
		}()
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := router.Run(ctx); err != nil {
		return fail(err)
	}
	if !done.Load() {
		return fail(errors.New("no message was charged before the timeout"))
	}
	return 0
}

func post(ctx context.Context, url, idempotencyKey string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}
