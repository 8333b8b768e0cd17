package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// charge is what the payments service asks the provider for.
type charge struct {
	PaymentID string `json:"payment_id"`
	Amount    int64  `json:"amount"`
}

// chargeReply is the provider's answer. Replayed says the key was seen before and no new charge was made.
type chargeReply struct {
	ID       string `json:"id"`
	Replayed bool   `json:"replayed"`
}

// provider is a stand-in for a payment provider on loopback. Like the real ones it honours an Idempotency-Key
// header: the first request with a key charges, a later one with the same key gets the first answer back and
// charges nothing, and a later one with the same key but another body is refused.
//
// It can hold back one answer, to stage a call that hangs past the caller's lease: the first charge of payment
// hangPayment is made and recorded at once, and its answer held until another request replays that key, or
// releaseHeld is called.
type provider struct {
	URL         string
	srv         *http.Server
	hangPayment string
	release     chan struct{} // closed when the held answer may go
	releaseOnce sync.Once

	mu         sync.Mutex
	heldKey    string // the key whose answer is held, once chosen
	byKey      map[string]keyed
	perPayment map[string]int // charges made per payment ID

	calls   atomic.Int64 // requests to /charges
	charges atomic.Int64 // charges made
	replays atomic.Int64 // requests answered from an earlier charge
}

type keyed struct {
	req   charge
	reply chargeReply
}

// startProvider serves a provider on a free loopback port until Close.
func startProvider(hangPayment string) (*provider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("start payment provider: %w", err)
	}
	p := &provider{
		URL:         "http://" + ln.Addr().String(),
		hangPayment: hangPayment,
		release:     make(chan struct{}),
		byKey:       map[string]keyed{},
		perPayment:  map[string]int{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", p.charge)
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Close lets a held answer go, so no caller is left hanging, and stops the server.
func (p *provider) Close() error {
	p.releaseHeld()
	return p.srv.Close()
}

// releaseHeld lets the held answer go, if any is held now or later.
func (p *provider) releaseHeld() { p.releaseOnce.Do(func() { close(p.release) }) }

func (p *provider) charge(w http.ResponseWriter, r *http.Request) {
	p.calls.Add(1)
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "Idempotency-Key required", http.StatusBadRequest)
		return
	}
	var req charge
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}

	p.mu.Lock()
	prev, seen := p.byKey[key]
	reply := prev.reply
	switch {
	case seen && prev.req != req:
		p.mu.Unlock()
		http.Error(w, "Idempotency-Key reused with another request", http.StatusUnprocessableEntity)
		return
	case seen:
		reply.Replayed = true
		p.replays.Add(1)
	default:
		reply = chargeReply{ID: fmt.Sprintf("ch_%03d", p.charges.Add(1))}
		p.byKey[key] = keyed{req: req, reply: reply}
		p.perPayment[req.PaymentID]++
	}
	hold := !seen && req.PaymentID == p.hangPayment && p.heldKey == ""
	if hold {
		p.heldKey = key
	}
	if seen && key == p.heldKey {
		// The takeover the demo waits for has happened: the held answer may go now.
		p.releaseHeld()
	}
	p.mu.Unlock()

	if hold {
		// The charge is made; only its answer is late, which is the case an idempotency key exists for.
		select {
		case <-p.release:
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(reply)
}

// chargesPerPayment returns how many charges were made for each payment ID.
func (p *provider) chargesPerPayment() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := make(map[string]int, len(p.perPayment))
	for id, n := range p.perPayment {
		m[id] = n
	}
	return m
}

// providerClient calls the provider.
type providerClient struct {
	url  string
	http *http.Client
}

// charge asks the provider to charge c under idempotencyKey.
func (c providerClient) charge(ctx context.Context, idempotencyKey string, ch charge) (chargeReply, error) {
	body, err := json.Marshal(ch)
	if err != nil {
		return chargeReply{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/charges", bytes.NewReader(body))
	if err != nil {
		return chargeReply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", idempotencyKey)
	resp, err := c.http.Do(req)
	if err != nil {
		return chargeReply{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return chargeReply{}, fmt.Errorf("provider: %s", resp.Status)
	}
	var reply chargeReply
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil {
		return chargeReply{}, err
	}
	if reply.ID == "" {
		return chargeReply{}, errors.New("provider: answer without a charge ID")
	}
	return reply, nil
}
