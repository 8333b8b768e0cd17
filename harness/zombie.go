package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// zombieTimeouts are the zombie command's group timeouts. The rebalance timeout is what evicts the stalled member,
// so it is short; the session timeout must be longer than any wait in a rebalance, because kfake (unlike Kafka,
// which keeps a member alive while it awaits a join) expires a member whose session runs out while it waits in
// JoinGroup, and never answers that JoinGroup: Sarama then hangs for its 30 s read timeout. A healthy member
// waits at most the rebalance timeout after the last member joined, so twice the rebalance timeout is safe.
var zombieTimeouts = groupTimeouts{session: 6 * time.Second, heartbeat: time.Second, rebalance: 3 * time.Second}

// zombieConfig is one `harness zombie` invocation.
type zombieConfig struct {
	Variants   []variant
	Runs       int
	Events     int
	Consumers  int
	StallEvery int           // one message in StallEvery stalls the first time it is handled
	StallFor   time.Duration // longer than the rebalance timeout, so the stalled member cannot rejoin in time
	Sleep      time.Duration
	Seed       uint64
	Drain      time.Duration
}

// zombieResult is one run of one variant.
type zombieResult struct {
	Variant         variant
	Run             int
	Stalls          int // handlers that stalled
	StallsEvicted   int // stalls during which the broker dropped the stalled member from the group
	Evictions       int // members dropped (one member stalled on two partitions at once is evicted once)
	ZombieWrites    int // credits a stalled handler committed after its member was evicted
	TakenOver       int // stalled messages another consumer received while the zombie still held them
	ZombieDups      int // duplicate credits of stalled messages
	Duplicates      int // all duplicate credits of the run, rebalance replays included
	Losses          int
	SkippedStalled  int // "skipped duplicate" of a stalled message by the inbox of another consumer
	Rebalances      int // rebalances the harness started
	Elapsed         time.Duration
	UnevictedStalls int // stalls that ended before any eviction: the run did not test what it should
}

// stall is what the parent learns about one stalled handler.
type stall struct {
	event, consumer string
	member          string // the stalled process's member ID when the stall began
	start           time.Time
	evicted         time.Time // zero until the broker's group no longer lists member
	resumed         time.Time // zero until the handler reports it goes on to write
}

// runZombie runs every variant Runs times, interleaved.
func runZombie(ctx context.Context, e *env, c zombieConfig) ([]zombieResult, error) {
	var results []zombieResult
	for r := range c.Runs {
		for _, v := range c.Variants {
			res, err := zombieRun(ctx, e, c, v, r)
			if err != nil {
				return results, err
			}
			e.logf("zombie %s run %d/%d: %d stalls, %d evictions, %d zombie writes, %d duplicate credits of stalled messages, %d duplicates in all, %d lost (%s)",
				v, r+1, c.Runs, res.Stalls, res.Evictions, res.ZombieWrites, res.ZombieDups, res.Duplicates, res.Losses, res.Elapsed.Round(time.Second))
			results = append(results, res)
		}
	}
	return results, nil
}

// zombieRun runs Consumers consumers over one topic. When a handler stalls, a member joins the group, as a new
// instance of a deploy would, which starts a rebalance. Sarama ends its session for a rebalance only when every
// ConsumeClaim has returned, and watermill-kafka's does not return while a message is unacked, so the stalled
// member cannot rejoin; after the rebalance timeout the broker drops it and hands its partitions to the others,
// which get the stalled message again from the last committed offset. The stalled handler then wakes up and
// writes, unaware. The harness sees the eviction from the broker's side: the member ID the stalled process had is
// gone from the group's description while the handler is still stalled.
func zombieRun(ctx context.Context, e *env, c zombieConfig, v variant, r int) (zombieResult, error) {
	start := time.Now()
	run := newRun("zombie", v, r)
	res := zombieResult{Variant: v, Run: r}
	if err := e.br.createTopic(run, e.partitions); err != nil {
		return res, err
	}
	defer e.br.deleteTopic(run)
	rnd := rand.New(rand.NewPCG(c.Seed+uint64(r), 2))
	if err := publishRun(ctx, e.db, e.br.addrs, run, run, c.Events, e.accounts, rnd, v.publisherOptions()...); err != nil {
		return res, err
	}

	var mu sync.Mutex
	stalls := map[string]*stall{}
	trig := &rebalancer{e: e, group: run}
	var watchers sync.WaitGroup
	onLine := func(p *proc, line string) {
		kind, id, _ := strings.Cut(line, " ")
		switch kind {
		case "stall":
			s := &stall{event: id, consumer: p.name, start: time.Now()}
			mu.Lock()
			stalls[id] = s
			mu.Unlock()
			watchers.Add(1)
			go func() {
				defer watchers.Done()
				e.watchStall(run, s, &mu, trig)
			}()
		case "resume":
			mu.Lock()
			if s := stalls[id]; s != nil {
				s.resumed = time.Now()
			}
			mu.Unlock()
		}
	}
	var procs []*proc
	defer func() {
		for _, p := range procs {
			if p.alive() {
				p.kill()
			}
		}
	}()
	for i := range c.Consumers {
		cfg := e.consumerConfig(v, run, fmt.Sprintf("%s-c%d", run, i+1), c.Sleep)
		cfg.StallEvery, cfg.StallFor = c.StallEvery, c.StallFor
		p, err := spawn(e.bin, e.logDir, cfg, onLine)
		if err != nil {
			return res, err
		}
		procs = append(procs, p)
	}
	allAlive := func() bool {
		for _, p := range procs {
			if !p.alive() {
				return false
			}
		}
		return true
	}
	// Every stalled handler must have written before the run is counted, and the stalls come late when the
	// group spends its time rebalancing, so wait for those first, then for the drain.
	expected := c.Events / c.StallEvery // seq s stalls when s % StallEvery == StallEvery-1
	deadline := time.Now().Add(c.Drain)
	for {
		mu.Lock()
		n, open := len(stalls), 0
		for _, s := range stalls {
			if s.resumed.IsZero() {
				open++
			}
		}
		mu.Unlock()
		if n >= expected && open == 0 {
			break
		}
		if !allAlive() {
			return res, fmt.Errorf("run %s: a consumer exited", run)
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("run %s: %d of %d stalls seen, %d still open after %s", run, n, expected, open, c.Drain)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err := e.waitDrained(ctx, run, 2*time.Second, c.Drain, allAlive); err != nil {
		return res, err
	}
	watchers.Wait()
	for _, p := range procs {
		if err := p.stop(time.Minute); err != nil {
			return res, err
		}
	}
	return res, e.countZombies(ctx, run, stalls, procs, trig, &res, start)
}

// watchStall finds the stalled process's member ID, starts a rebalance, and polls the group until the member is
// gone (evicted) or the stall ends.
func (e *env) watchStall(group string, s *stall, mu *sync.Mutex, trig *rebalancer) {
	for i := 0; i < 40 && s.member == ""; i++ {
		members, err := e.br.groupMembers(group)
		if err == nil {
			for id, client := range members {
				if client == s.consumer {
					mu.Lock()
					s.member = id
					mu.Unlock()
				}
			}
		}
		if s.member == "" {
			time.Sleep(50 * time.Millisecond)
		}
	}
	trig.kick()
	for {
		mu.Lock()
		done := !s.resumed.IsZero()
		mu.Unlock()
		if done || s.member == "" {
			return
		}
		members, err := e.br.groupMembers(group)
		if err == nil {
			if _, ok := members[s.member]; !ok {
				mu.Lock()
				s.evicted = time.Now()
				mu.Unlock()
				e.logf("  %s: %s evicted %.1fs into its stall on %s", group, s.consumer, time.Since(s.start).Seconds(), s.event)
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// countZombies fills res from the stalls, the ledger and the consumers' skip lines.
func (e *env) countZombies(ctx context.Context, run string, stalls map[string]*stall, procs []*proc, trig *rebalancer, res *zombieResult, start time.Time) error {
	t, err := count(ctx, e.db, run)
	if err != nil {
		return err
	}
	res.Duplicates, res.Losses = t.Duplicates, t.Losses
	ids := make([]string, 0, len(stalls))
	for id := range stalls {
		ids = append(ids, id)
	}
	writes, err := writesOf(ctx, e.db, run, ids)
	if err != nil {
		return err
	}
	skippedBy := map[string]map[string]bool{} // event -> consumers that skipped it
	for _, p := range procs {
		for _, id := range p.find("skip ") {
			if skippedBy[id] == nil {
				skippedBy[id] = map[string]bool{}
			}
			skippedBy[id][p.name] = true
		}
	}
	evicted := map[string]bool{}
	for id, s := range stalls {
		res.Stalls++
		ws := writes[id]
		if len(ws) > 1 {
			res.ZombieDups += len(ws) - 1
		}
		if s.evicted.IsZero() {
			res.UnevictedStalls++
			continue
		}
		evicted[s.member] = true
		res.StallsEvicted++
		otherGotIt := false
		for _, w := range ws {
			if w.Consumer == s.consumer && w.At.After(s.evicted.Add(-time.Second)) {
				res.ZombieWrites++
			}
			if w.Consumer != s.consumer {
				otherGotIt = true
			}
		}
		for c := range skippedBy[id] {
			if c != s.consumer {
				otherGotIt = true
				res.SkippedStalled++
			}
		}
		if otherGotIt {
			res.TakenOver++
		}
	}
	res.Evictions = len(evicted)
	res.Rebalances = trig.count()
	res.Elapsed = time.Since(start)
	return cleanup(ctx, e.db, run)
}

// rebalancer starts rebalances the way a deploy does: a new member joins the group, stays for one generation and
// leaves. It owns no offsets and consumes nothing; its partitions go back to the others when it leaves.
type rebalancer struct {
	e     *env
	group string

	mu     sync.Mutex
	active bool
	n      int
}

// kick starts a joiner unless one is already joining: a joiner that has not got its assignment yet is itself a
// rebalance in progress, which every stalled member must also rejoin.
func (rb *rebalancer) kick() {
	rb.mu.Lock()
	if rb.active {
		rb.mu.Unlock()
		return
	}
	rb.active = true
	rb.n++
	rb.mu.Unlock()
	go func() {
		defer func() {
			rb.mu.Lock()
			rb.active = false
			rb.mu.Unlock()
		}()
		if err := rb.join(); err != nil {
			rb.e.logf("  %s: the joining member failed: %v", rb.group, err)
		}
	}()
}

func (rb *rebalancer) count() int {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	return rb.n
}

func (rb *rebalancer) join() error {
	cfg := sarama.NewConfig()
	cfg.Version = kafkaVersion
	cfg.ClientID = rb.group + "-deploy"
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.Group.Session.Timeout = rb.e.session
	cfg.Consumer.Group.Heartbeat.Interval = rb.e.heartbeat
	cfg.Consumer.Group.Rebalance.Timeout = rb.e.rebalance
	g, err := sarama.NewConsumerGroup(rb.e.br.addrs, rb.group, cfg)
	if err != nil {
		return err
	}
	defer g.Close() // leaves the group: the second rebalance
	ctx, cancel := context.WithTimeout(context.Background(), 4*rb.e.rebalance+30*time.Second)
	defer cancel()
	h := joiner{assigned: cancel}
	if err := g.Consume(ctx, []string{rb.group}, h); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// joiner is the rebalancer's group handler: it leaves as soon as it has been given its share.
type joiner struct{ assigned context.CancelFunc }

func (j joiner) Setup(sarama.ConsumerGroupSession) error { j.assigned(); return nil }
func (joiner) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (joiner) ConsumeClaim(s sarama.ConsumerGroupSession, _ sarama.ConsumerGroupClaim) error {
	<-s.Context().Done()
	return nil
}
