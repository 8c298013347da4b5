// Package publish writes computed policy to etcd, from the elected leader
// only (etcd concurrency.Election): only documents whose content changed,
// in transactions of at most MaxTxnOps operations each guarded by the
// leader key, then the fabric generation key last, so agents can tell a
// complete update (docs/etcd-layout.md); an update that fits in one
// transaction carries the generation key in it. Recomputation is debounced and
// coalesced: Trigger may be called at any rate.
//
// The leader does not trust its memory of etcd: it reads every document it
// owns when elected, again every ReconcileEvery, and whenever a watch on its
// keys reports a change it did not make. A document found different from
// what it wrote (changed, deleted, added, its generation altered) is drift:
// it is counted (multiplane_policy_drift_repairs_total) and rewritten at a
// new generation, so agents apply the repair. Generations never go
// backwards or wrap: the next one is above every generation found in etcd,
// and none above MaxGeneration is ever published.
//
//	p := publish.New(cli, publish.DefaultConfig(), logger)
//	go p.Run(ctx, compute) // campaigns, then publishes on every Trigger
//	p.Trigger()
package publish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/policy"
)

// Config tunes publishing.
type Config struct {
	// Debounce is the pause in triggers that starts a computation; MaxDelay
	// bounds how long a burst of triggers can hold it back (50 ms: a plane
	// failing at its switch is a burst of thousands of link events, and the
	// first computation, which already sees the plane down, should not
	// wait for the burst's end; bench-e2e convergence at 4,000 endpoints:
	// published 398 ms after the failure with 50 ms, 737 ms with 200 ms).
	Debounce time.Duration
	MaxDelay time.Duration
	// Health changes (TriggerHealth: link and switch transitions) wait
	// for a pause of HoldQuiet, up to HoldMax: computed mid-burst, a
	// plane failing link by link would write the link state of every
	// endpoint whose port failed so far (thousands of documents), then
	// write them back once the plane is judged down and covers them.
	// TriggerNow (a plane going down) ends any wait at once. At 16,000
	// endpoints a loaded fabricd takes in a plane's failure over a
	// second, slowly at first and with pauses of up to 85 ms: holding
	// only bursts of 64 changes, ended by a 50 ms pause or after 250 ms,
	// published 2,082-3,320 documents, then as many again, before the
	// plane was judged down (bench-e2e convergence).
	HoldQuiet time.Duration
	HoldMax   time.Duration
	// A burst of at least HoldBurst health changes is a switch or a plane
	// failing; it is held up to HoldBurstMax instead of HoldMax. At 16,000
	// endpoints a loaded fabricd took in half of a failing plane's links
	// (when it judges the plane down) over 0.6-2.1 s: past HoldMax, a
	// publication wrote 6,600-8,800 documents, then wrote them back.
	HoldBurst    int
	HoldBurstMax time.Duration
	// HoldBurstQuiet is the pause that ends such a burst: at 16,000
	// endpoints a loaded fabricd paused over 200 ms in the middle of a
	// plane's failure, and the publication after that pause wrote 7,607
	// documents, then wrote them back.
	HoldBurstQuiet time.Duration
	// A burst of recoveries only (TriggerRecovery: links and switches
	// coming back) is held up to HoldRecoverMax: nothing waits on it but
	// capacity, while publishing it mid-recovery writes every endpoint
	// whose link is not back yet, then writes them again. At 16,000
	// endpoints a plane's links came back over more than HoldBurstMax and
	// a plane up wrote 11,189 documents in 3 generations.
	HoldRecoverMax time.Duration
	// MaxTxnOps bounds the operations in one etcd transaction (etcd's
	// default --max-txn-ops is 128).
	MaxTxnOps int
	// ParallelTxns is how many transactions are in flight at once.
	ParallelTxns int
	// SessionTTL is the leader lease in seconds: a dead leader is replaced
	// after about this long.
	SessionTTL int
	// ID names this replica in the leader key and generation documents.
	ID string
	// ReconcileEvery is how often the leader re-reads its documents from
	// etcd and repairs drift, besides after every foreign change its watch
	// sees.
	ReconcileEvery time.Duration
	// AttemptTimeout bounds one read or transaction of the leader; one that
	// fails or times out is tried again while the leader's session lives.
	// etcd itself answers a request whose member lost its raft leader only
	// after 7 s (5 s + 2 election timeouts); a new attempt reaches the new
	// leader as soon as there is one.
	AttemptTimeout time.Duration
	// StatusWriteRate is the rate of status writes the agents' applies of
	// one generation may cost etcd, all agents together: the generation
	// key asks them to spread their writes over endpoints / rate (16,000
	// agents writing within 0.5 s after every generation took etcd's
	// writes, the leader's included, from milliseconds to seconds).
	StatusWriteRate int
}

// MaxGeneration is the highest generation the publisher writes: 2^53, the
// largest integer every JSON consumer (float64 numbers) reads exactly. A
// larger generation found in etcd is taken as corruption: the publisher
// refuses to publish past it (ErrGenerationExhausted, an error log and
// multiplane_policy_generation_refusals_total) and keeps serving what is
// there, rather than wrap to 0 or go backwards, which agents would ignore
// or misapply. An operator repairs etcd by hand (docs/etcd-layout.md).
const MaxGeneration uint64 = 1 << 53

// ErrGenerationExhausted is returned when the next generation would exceed
// MaxGeneration.
var ErrGenerationExhausted = errors.New("publish: generation would exceed 2^53; etcd holds a corrupt generation")

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{Debounce: 20 * time.Millisecond, MaxDelay: 50 * time.Millisecond,
		HoldQuiet: 200 * time.Millisecond, HoldMax: time.Second, HoldBurst: 1000, HoldBurstMax: 4 * time.Second, HoldBurstQuiet: time.Second, HoldRecoverMax: 10 * time.Second, StatusWriteRate: 8000, MaxTxnOps: 128, ParallelTxns: 32, SessionTTL: 5,
		ID: fmt.Sprintf("%s-%d", host, os.Getpid()), ReconcileEvery: 30 * time.Second,
		AttemptTimeout: 2 * time.Second}
}

var errCrashed = errors.New("publish: crashed mid-update (test failpoint)")

// ErrLostLeadership is returned when a guarded write finds another leader.
var ErrLostLeadership = errors.New("publish: no longer the leader")

// Input is one computation to publish.
type Input struct {
	Output           policy.Output
	TopologyRevision int64
}

// ComputeFunc computes the current policy.
type ComputeFunc func(ctx context.Context) (Input, error)

// Result describes one publication.
type Result struct {
	Generation uint64
	Written    int // documents written (the generation key included)
	Deleted    int
	Txns       int
	Bytes      int
	Duration   time.Duration // writing to etcd
	Compute    time.Duration // computing the policy
}

// Publisher campaigns for leadership and publishes while leader.
type Publisher struct {
	cli    *clientv3.Client
	cfg    Config
	logger *slog.Logger

	trigger chan struct{}
	urgent  chan struct{}
	// urgentAt is when the oldest TriggerNow not yet taken up came (Unix
	// ns, 0: none): the planes' publication logs how long it waited.
	urgentAt atomic.Int64
	plain    atomic.Int64 // Trigger calls since the current wait began
	health   atomic.Int64 // TriggerHealth calls
	healed   atomic.Int64 // TriggerRecovery calls
	leader   atomic.Bool
	// recording: this replica was the last leader it knows of (it stays
	// true while etcd is unreachable, until another leader is seen).
	recording atomic.Bool
	term      atomic.Int64 // the election revision of this replica's last leadership
	// crashAfterTxns, when > 0, makes publish stop dead after that many
	// transactions, as a leader killed mid-update would (tests only).
	crashAfterTxns int
	// noWatch disables the watch on owned keys (tests of the periodic
	// reconciliation).
	noWatch bool
	// planesNow, when set, gives the planes' statuses as they are now
	// (SetPlanesNow).
	planesNow PlanesFunc
	mu        sync.Mutex
	last      Result
	onResult  func(Result)

	driftRepairs    atomic.Uint64 // documents found drifted and rewritten
	reconciliations atomic.Uint64
	refusals        atomic.Uint64 // publications refused at MaxGeneration
	highest         atomic.Uint64 // the highest generation this process published
}

// New returns a publisher; Run starts it.
func New(cli *clientv3.Client, cfg Config, logger *slog.Logger) *Publisher {
	d := DefaultConfig()
	if cfg.Debounce <= 0 {
		cfg.Debounce = d.Debounce
	}
	if cfg.MaxDelay < cfg.Debounce {
		cfg.MaxDelay = max(d.MaxDelay, cfg.Debounce)
	}
	if cfg.HoldQuiet <= 0 {
		cfg.HoldQuiet = d.HoldQuiet
	}
	cfg.HoldQuiet = max(cfg.HoldQuiet, cfg.Debounce)
	cfg.HoldMax = max(cfg.HoldMax, cfg.MaxDelay, cfg.HoldQuiet)
	if cfg.HoldBurst <= 0 {
		cfg.HoldBurst = d.HoldBurst
	}
	cfg.HoldBurstMax = max(cfg.HoldBurstMax, cfg.HoldMax)
	cfg.HoldBurstQuiet = min(max(cfg.HoldBurstQuiet, cfg.HoldQuiet), cfg.HoldBurstMax)
	cfg.HoldRecoverMax = max(cfg.HoldRecoverMax, cfg.HoldMax)
	if cfg.MaxTxnOps <= 0 {
		cfg.MaxTxnOps = d.MaxTxnOps
	}
	if cfg.ParallelTxns <= 0 {
		cfg.ParallelTxns = d.ParallelTxns
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = d.SessionTTL
	}
	if cfg.ID == "" {
		cfg.ID = d.ID
	}
	if cfg.ReconcileEvery <= 0 {
		cfg.ReconcileEvery = d.ReconcileEvery
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = d.AttemptTimeout
	}
	if cfg.StatusWriteRate <= 0 {
		cfg.StatusWriteRate = d.StatusWriteRate
	}
	return &Publisher{cli: cli, cfg: cfg, logger: logger, trigger: make(chan struct{}, 1), urgent: make(chan struct{}, 1)}
}

// PlanesFunc returns the planes' statuses as they are now (policy.Planes
// on the health engine and the intents last computed with); false when
// it cannot tell.
type PlanesFunc func() ([]contract.PlaneStatus, bool)

// SetPlanesNow makes TriggerNow publish the planes' statuses from f at
// once, ahead of the full computation, which then publishes only what
// else changed. Call it before Run.
func (p *Publisher) SetPlanesNow(f PlanesFunc) { p.planesNow = f }

// OnResult sets a callback for every publication (metrics, benchmarks).
// Call it before Run.
func (p *Publisher) OnResult(f func(Result)) { p.onResult = f }

// Trigger asks for a recomputation (the topology or the operator's
// intents changed); calls coalesce over Debounce.
func (p *Publisher) Trigger() {
	p.plain.Add(1)
	p.signal()
}

// TriggerHealth asks for a recomputation after a health transition; those
// coalesce until they pause for HoldQuiet (Config.HoldQuiet).
func (p *Publisher) TriggerHealth() {
	p.health.Add(1)
	p.signal()
}

// TriggerRecovery asks for a recomputation after a health transition
// towards health (a link up, a plane from down to degraded); a burst of
// them alone is held up to HoldRecoverMax (Config.HoldRecoverMax).
func (p *Publisher) TriggerRecovery() {
	p.healed.Add(1)
	p.signal()
}

// Recheck asks for a recomputation that nothing waits on (a periodic
// re-read of the inputs, in case a change notification was missed): it
// joins a burst of health changes rather than ending it, and otherwise
// waits for HoldQuiet.
func (p *Publisher) Recheck() { p.TriggerRecovery() }

// TriggerNow asks for a recomputation that does not wait for a burst to
// end: something failed that endpoints must leave at once (a plane down).
func (p *Publisher) TriggerNow() {
	p.urgentAt.CompareAndSwap(0, time.Now().UnixNano())
	select {
	case p.urgent <- struct{}{}:
	default:
	}
	p.TriggerHealth()
}

func (p *Publisher) signal() {
	select {
	case p.trigger <- struct{}{}:
	default:
	}
}

// IsLeader reports whether this replica leads now.
func (p *Publisher) IsLeader() bool { return p.leader.Load() }

// Recording reports whether this replica should record what happens (the
// event history): true while it leads, and while etcd is unreachable after
// it led, until it sees another leader. Replicas see the same transitions;
// this keeps one writer without losing history when etcd is away.
func (p *Publisher) Recording() bool { return p.recording.Load() }

// Term is the etcd election revision of this replica's latest
// leadership (0: never led), and whether it leads now: later leaderships
// have higher terms, so the history refuses a deposed leader's writes
// (events.Store.AppendAs).
func (p *Publisher) Term() (int64, bool) { return p.term.Load(), p.leader.Load() }

// Last is the latest publication of this replica.
func (p *Publisher) Last() Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// Leader returns the current leader's ID ("" when there is none).
func Leader(ctx context.Context, cli *clientv3.Client) (string, error) {
	resp, err := cli.Get(ctx, contract.PrefixLeader, clientv3.WithFirstCreate()...)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// Run campaigns and, while leader, publishes on every trigger (and once on
// winning). It returns when ctx ends; losing leadership starts a new
// campaign.
func (p *Publisher) Run(ctx context.Context, compute ComputeFunc) error {
	for ctx.Err() == nil {
		err := p.lead(ctx, compute)
		if errors.Is(err, errCrashed) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			p.logger.Warn("leadership ended", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return nil
}

func (p *Publisher) lead(ctx context.Context, compute ComputeFunc) error {
	sess, err := concurrency.NewSession(p.cli, concurrency.WithTTL(p.cfg.SessionTTL), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("publish: session: %w", err)
	}
	defer sess.Close()
	el := concurrency.NewElection(sess, contract.PrefixLeader)
	if other, err := Leader(ctx, p.cli); err == nil && other != "" && other != p.cfg.ID {
		p.recording.Store(false)
	}
	if err := el.Campaign(ctx, p.cfg.ID); err != nil {
		return fmt.Errorf("publish: campaign: %w", err)
	}
	p.term.Store(el.Rev())
	p.leader.Store(true)
	p.recording.Store(true)
	defer p.leader.Store(false)
	p.logger.Info("elected policy leader", "id", p.cfg.ID)
	guard := clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev())

	// Read etcd afresh on every election: nothing is trusted from a
	// previous term but the floor of generations: they never go back.
	w := &writer{p: p, guard: guard, alive: sess.Done(), own: map[int64]bool{}, generation: p.highest.Load()}
	rev, err := w.load(ctx)
	if err != nil {
		return err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	foreign := make(chan struct{}, 1)
	if !p.noWatch {
		go w.watch(watchCtx, rev+1, foreign)
	}
	reconcile := time.NewTicker(p.cfg.ReconcileEvery)
	defer reconcile.Stop()
	p.Trigger() // publish once on winning
	for {
		now := false
		select {
		case <-ctx.Done():
			resign, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			el.Resign(resign)
			cancel()
			return nil
		case <-sess.Done():
			return errors.New("publish: leader session expired")
		case <-p.trigger:
		case <-p.urgent:
			now = true
		case <-foreign:
			if !w.takeForeign() {
				continue // only our own writes
			}
			if err := w.reconcile(ctx); err != nil {
				return err
			}
		case <-reconcile.C:
			if err := w.reconcile(ctx); err != nil {
				return err
			}
		}
		woken := time.Now()
		now = p.wait(ctx, now)
		if ctx.Err() != nil {
			continue
		}
		if now && p.planesNow != nil {
			published, err := p.publishPlanes(ctx, w)
			if err != nil {
				return err
			}
			if published {
				// The rest once the failure's burst is over, not while
				// the agents take the planes (nor at once when they had
				// them already: a second TriggerNow mid-failure).
				p.TriggerHealth()
				continue
			}
		}
		computeStart := time.Now()
		waited := computeStart.Sub(woken)
		in, err := compute(ctx)
		computeTook := time.Since(computeStart)
		if err != nil {
			p.logger.Error("policy computation failed; keeping the published generation", "err", err)
			continue
		}
		res, err := w.publish(ctx, in)
		if errors.Is(err, ErrGenerationExhausted) {
			p.refusals.Add(1)
			p.logger.Error("refusing to publish: the next generation would exceed the bound; keeping what etcd holds",
				"generation", w.generation, "max", MaxGeneration)
			continue
		}
		if err != nil {
			return err
		}
		res.Compute = computeTook
		if res.Written > 0 {
			p.record(res)
			p.logger.Info("policy published", "generation", res.Generation, "written", res.Written,
				"deleted", res.Deleted, "txns", res.Txns, "bytes", res.Bytes, "debounce", waited, "compute", res.Compute, "write", res.Duration)
		}
	}
}

// wait coalesces a burst of triggers: it returns once they pause for
// Debounce, or MaxDelay after it began; or, when only health changes
// came (a plane fails switch by switch, in chunks), once they pause for
// HoldQuiet or HoldMax after it began (HoldBurstQuiet and HoldBurstMax
// once HoldBurst came, HoldRecoverMax while all were recoveries); at once
// on TriggerNow (now: already), and then it returns true.
func (p *Publisher) wait(ctx context.Context, now bool) bool {
	defer func() { p.plain.Store(0); p.health.Store(0); p.healed.Store(0) }()
	if now {
		return true
	}
	start := time.Now()
	for {
		quiet, limit := p.cfg.Debounce, p.cfg.MaxDelay
		if health, healed := p.health.Load(), p.healed.Load(); p.plain.Load() == 0 && health+healed > 0 {
			quiet, limit = p.cfg.HoldQuiet, p.cfg.HoldMax
			if health+healed >= int64(p.cfg.HoldBurst) {
				quiet, limit = p.cfg.HoldBurstQuiet, p.cfg.HoldBurstMax
			}
			if health == 0 {
				limit = p.cfg.HoldRecoverMax
			}
		}
		left := limit - time.Since(start)
		if left <= 0 {
			return false
		}
		select {
		case <-time.After(min(quiet, left)):
			return false
		case <-p.trigger:
		case <-p.urgent:
			return true
		case <-ctx.Done():
			return false
		}
	}
}

// writer holds what etcd has, as this leader last wrote or read it.
type writer struct {
	p          *Publisher
	guard      clientv3.Cmp
	alive      <-chan struct{}   // closed when the leader's session ends
	content    map[string][]byte // key → document without its generation
	gens       map[string]uint64 // key → generation of the stored document
	generation uint64            // the highest generation in etcd or written
	genKey     uint64            // what the generation key says
	genRaw     []byte            // the generation key as stored
	// last are the endpoint and directory documents of the last complete
	// publication, whose encodings content holds: an equal document is
	// not encoded again (8,000 of them per computation at 4,000
	// endpoints, nearly all unchanged).
	last map[string]any
	// lastIn is the input of the last complete publication (nil after a
	// failed or partial one, and before the first): publishPlanes builds
	// on it.
	lastIn *Input

	mu      sync.Mutex
	own     map[int64]bool // etcd revisions of our own transactions
	foreign []int64        // revisions of changes the watch saw, not yet checked
}

// ownedStart and ownedEnd bound the keys the leader writes: directory/,
// endpoints/ and fabric/ (in that order), as one range.
const (
	ownedStart = contract.PrefixDirectory
	ownedEnd   = contract.Prefix + "fabric0" // just after every fabric/ key
)

// load reads every document this leader may write, at one revision, and
// returns that revision.
func (w *writer) load(ctx context.Context) (int64, error) {
	var resp *clientv3.GetResponse
	err := w.attempt(ctx, func(ctx context.Context) (err error) {
		resp, err = w.p.cli.Get(ctx, ownedStart, clientv3.WithRange(ownedEnd))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("publish: read documents: %w", err)
	}
	// Generations never go backwards, even when etcd lost or had its
	// documents deleted: the floor is the highest this writer knows of.
	floor := w.generation
	w.content, w.gens, w.genKey, w.genRaw, w.last = map[string][]byte{}, map[string]uint64{}, 0, nil, nil
	w.generation = floor
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		gen, content := canonical(key, kv.Value)
		w.generation = max(w.generation, gen)
		switch {
		case key == contract.KeyGeneration:
			w.genKey, w.genRaw = gen, kv.Value
			if content == nil { // not as this package writes it
				w.genKey = 0
			}
		case content != nil:
			w.content[key], w.gens[key] = content, gen
		case owned(key): // a key no one should write here: publish deletes it
			w.content[key], w.gens[key] = []byte("foreign"), gen
		}
	}
	return resp.Header.Revision, nil
}

// reconcile re-reads etcd, counts the documents that differ from what this
// leader last wrote, and triggers a publication that rewrites them.
func (w *writer) reconcile(ctx context.Context) error {
	prevContent, prevGens, prevGen, prevGenRaw := w.content, w.gens, w.generation, w.genRaw
	if _, err := w.load(ctx); err != nil {
		return err
	}
	w.p.reconciliations.Add(1)
	if prevContent == nil { // a failed update: nothing known to compare
		w.p.Trigger()
		return nil
	}
	drift := 0
	for key, c := range prevContent {
		now, ok := w.content[key]
		switch {
		case !ok: // deleted: publish writes it again
			drift++
		case !bytes.Equal(now, c):
			drift++
		case w.gens[key] != prevGens[key]:
			drift++
			w.content[key] = []byte("drifted generation") // never equal: rewritten
		}
	}
	for key := range w.content {
		if _, ok := prevContent[key]; !ok { // added: publish deletes it
			drift++
		}
	}
	if w.genKey != prevGen || !bytes.Equal(w.genRaw, prevGenRaw) {
		drift++
		w.genKey = 0 // rewritten by the next publication
	}
	if drift > 0 {
		w.p.driftRepairs.Add(uint64(drift))
		w.p.logger.Warn("documents in etcd changed behind the leader's back; repairing", "documents", drift,
			"generation", w.generation)
		w.p.Trigger()
	}
	return nil
}

// watch reports changes to the owned keys from rev on, to be checked
// against the leader's own transactions. A broken watch (compaction, a lost
// connection) reports a change too, so the leader reconciles, and restarts.
func (w *writer) watch(ctx context.Context, rev int64, foreign chan<- struct{}) {
	signal := func(revs ...int64) {
		w.mu.Lock()
		w.foreign = append(w.foreign, revs...)
		w.mu.Unlock()
		select {
		case foreign <- struct{}{}:
		default:
		}
	}
	for ctx.Err() == nil {
		for resp := range w.p.cli.Watch(clientv3.WithRequireLeader(ctx), ownedStart, clientv3.WithRange(ownedEnd), clientv3.WithRev(rev)) {
			if err := resp.Err(); err != nil {
				break
			}
			var revs []int64
			for _, ev := range resp.Events {
				revs = append(revs, ev.Kv.ModRevision)
			}
			if len(revs) > 0 {
				signal(revs...)
			}
		}
		if ctx.Err() != nil {
			return
		}
		signal(-1) // unknown: reconcile
		rev = 0    // from now; the reconciliation covers the gap
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// takeForeign reports whether any change the watch saw was not made by
// this leader. Called between publications, when every own transaction's
// revision is recorded.
func (w *writer) takeForeign() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	found := false
	var seen int64
	for _, r := range w.foreign {
		if r < 0 || !w.own[r] {
			found = true
		}
		seen = max(seen, r)
	}
	w.foreign = w.foreign[:0]
	// The watch delivers in revision order: our revisions up to the
	// last one seen will not come again.
	for r := range w.own {
		if r <= seen {
			delete(w.own, r)
		}
	}
	return found
}

// owned reports whether key lies under a prefix only the leader writes.
func owned(key string) bool {
	return strings.HasPrefix(key, contract.PrefixDirectory) || strings.HasPrefix(key, contract.PrefixEndpoints) ||
		strings.HasPrefix(key, contract.Prefix+"fabric/")
}

// canonical decodes a stored document and returns its generation and its
// content encoded with generation 0, as publish encodes it for comparison
// (nil when it is not a document this package writes). A document that is
// not byte for byte what this package would write (foreign fields, another
// encoding) is returned as content that never compares equal.
// For the generation key the content is the stored value, nil when it is
// not as publish writes it.
func canonical(key string, value []byte) (uint64, []byte) {
	var doc interface{ setGeneration(uint64) uint64 }
	switch {
	case key == contract.KeyGeneration:
		var g contract.GenerationDoc
		if json.Unmarshal(value, &g) != nil {
			return 0, nil
		}
		if out, _ := json.Marshal(g); !bytes.Equal(out, value) {
			return g.Generation, nil
		}
		return g.Generation, value
	case key == contract.KeyPlanes:
		doc = &planesDoc{}
	case key == contract.KeyPorts:
		doc = &portsDoc{}
	case strings.HasPrefix(key, contract.PrefixEndpoints):
		doc = &endpointDoc{}
	case strings.HasPrefix(key, contract.PrefixDirectory):
		doc = &directoryDoc{}
	default:
		return 0, nil
	}
	if json.Unmarshal(value, doc) != nil {
		return 0, []byte("corrupt") // never equal: rewritten
	}
	if out, _ := json.Marshal(doc); !bytes.Equal(out, value) {
		return doc.setGeneration(0), []byte("corrupt")
	}
	gen := doc.setGeneration(0)
	out, _ := json.Marshal(doc)
	return gen, out
}

// Wrappers to read and zero the generation of each document type.
type (
	planesDoc    contract.PlanesDoc
	portsDoc     contract.PortsDoc
	endpointDoc  contract.EndpointSpec
	directoryDoc contract.DirectoryDoc
)

func (d *planesDoc) setGeneration(g uint64) (old uint64) { old, d.Generation = d.Generation, g; return }
func (d *portsDoc) setGeneration(g uint64) (old uint64)  { old, d.Generation = d.Generation, g; return }
func (d *endpointDoc) setGeneration(g uint64) (old uint64) {
	old, d.Generation = d.Generation, g
	return
}
func (d *directoryDoc) setGeneration(g uint64) (old uint64) {
	old, d.Generation = d.Generation, g
	return
}

// sameDocument reports whether two endpoint or directory documents have
// the same content, generations aside.
func sameDocument(a, b any) bool {
	switch a := a.(type) {
	case *endpointDoc:
		b, ok := b.(*endpointDoc)
		if !ok {
			return false
		}
		return a.Schema == b.Schema && a.Endpoint == b.Endpoint && a.Entropy == b.Entropy &&
			a.DegradedLinkFactor == b.DegradedLinkFactor && a.Class == b.Class && a.EgressBps == b.EgressBps &&
			a.IngressBps == b.IngressBps && slices.Equal(a.Ports, b.Ports)
	case *directoryDoc:
		b, ok := b.(*directoryDoc)
		if !ok {
			return false
		}
		return a.Schema == b.Schema && a.Endpoint == b.Endpoint && slices.Equal(a.Ports, b.Ports)
	}
	return false
}

type op struct {
	key string
	doc []byte // nil: delete
}

func (w *writer) publish(ctx context.Context, in Input) (Result, error) {
	start := time.Now()
	if w.content == nil { // the last update failed part-way: read what it left
		if _, err := w.load(ctx); err != nil {
			return Result{}, err
		}
	}
	if w.generation >= MaxGeneration {
		return Result{}, ErrGenerationExhausted
	}
	gen := w.generation + 1
	desired := map[string]interface{ setGeneration(uint64) uint64 }{}
	desired[contract.KeyPlanes] = &planesDoc{Schema: contract.SchemaVersion, Planes: in.Output.Planes}
	desired[contract.KeyPorts] = &portsDoc{Schema: contract.SchemaVersion, Unusable: in.Output.Unusable}
	for _, ep := range in.Output.Endpoints {
		spec := endpointDoc(ep.Spec)
		spec.Schema, spec.Generation = contract.SchemaVersion, 0
		desired[contract.KeyEndpoint(ep.Endpoint)] = &spec
		desired[contract.KeyDirectory(ep.Endpoint)] = &directoryDoc{Schema: contract.SchemaVersion, Endpoint: ep.Endpoint, Ports: ep.Ports}
	}
	var ops []op
	newContent := make(map[string][]byte, len(desired))
	last := make(map[string]any, len(desired))
	for key, d := range desired {
		// A document a failed update left (its generation is above the
		// generation key's) is written again at this generation, so the
		// generation key names exactly what it wrote.
		orphan := w.gens[key] > w.genKey
		if !orphan && sameDocument(w.last[key], d) && w.content[key] != nil {
			newContent[key], last[key] = w.content[key], w.last[key]
			continue
		}
		switch d.(type) {
		case *endpointDoc, *directoryDoc:
			last[key] = d
		}
		content, err := json.Marshal(d) // generation 0
		if err != nil {
			return Result{}, fmt.Errorf("publish: encode %s: %w", key, err)
		}
		newContent[key] = content
		if !orphan && bytes.Equal(w.content[key], content) {
			continue
		}
		d.setGeneration(gen)
		doc, _ := json.Marshal(d)
		ops = append(ops, op{key: key, doc: doc})
	}
	for key := range w.content {
		if _, ok := desired[key]; !ok {
			ops = append(ops, op{key: key})
		}
	}
	if len(ops) == 0 && w.genKey == w.generation {
		w.lastIn = &in
		return Result{Generation: w.generation}, nil
	}
	slices.SortFunc(ops, func(a, b op) int { return strings.Compare(a.key, b.key) })
	res := Result{Generation: gen}
	var batches [][]clientv3.Op
	for i := 0; i < len(ops); i += w.p.cfg.MaxTxnOps {
		batch := ops[i:min(i+w.p.cfg.MaxTxnOps, len(ops))]
		thens := make([]clientv3.Op, len(batch))
		for j, o := range batch {
			if o.doc == nil {
				thens[j] = clientv3.OpDelete(o.key)
				res.Deleted++
			} else {
				thens[j] = clientv3.OpPut(o.key, string(o.doc))
				res.Written++
				res.Bytes += len(o.key) + len(o.doc)
			}
		}
		batches = append(batches, thens)
	}
	genDoc, _ := json.Marshal(w.generationDoc(gen, in, ops))
	genOp := clientv3.OpPut(contract.KeyGeneration, string(genDoc))
	// A small update (a plane event, a drain) is one transaction with the
	// generation key: one commit, and agents see it all at one revision.
	together := w.p.crashAfterTxns == 0 && (len(batches) == 0 || (len(batches) == 1 && len(batches[0]) < w.p.cfg.MaxTxnOps))
	if together {
		if len(batches) == 0 {
			batches = append(batches, nil)
		}
		batches[0] = append(batches[0], genOp)
	}
	// Transactions go out several at a time (etcd commits concurrent
	// proposals together); the generation key follows when all succeeded.
	for i := 0; i < len(batches); i += w.p.cfg.ParallelTxns {
		group := batches[i:min(i+w.p.cfg.ParallelTxns, len(batches))]
		errs := make([]error, len(group))
		var wg sync.WaitGroup
		for j, thens := range group {
			wg.Go(func() { errs[j] = w.txn(ctx, thens) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			w.content = nil
			if slices.ContainsFunc(errs, func(e error) bool { return errors.Is(e, ErrLostLeadership) }) {
				return res, ErrLostLeadership
			}
			return res, err
		}
		res.Txns += len(group)
		if w.p.crashAfterTxns > 0 && res.Txns >= w.p.crashAfterTxns {
			return res, errCrashed
		}
	}
	if !together {
		if err := w.txn(ctx, []clientv3.Op{genOp}); err != nil {
			w.content = nil
			return res, err
		}
		res.Txns++
	}
	res.Written++
	res.Bytes += len(contract.KeyGeneration) + len(genDoc)
	for _, o := range ops {
		if o.doc == nil {
			delete(w.gens, o.key)
		} else {
			w.gens[o.key] = gen
		}
	}
	w.content, w.generation, w.genKey, w.genRaw, w.last, w.lastIn = newContent, gen, gen, genDoc, last, &in
	w.p.highest.Store(gen)
	res.Duration = time.Since(start)
	return res, nil
}

// record keeps a publication as the latest and reports it.
func (p *Publisher) record(res Result) {
	p.mu.Lock()
	p.last = res
	p.mu.Unlock()
	if p.onResult != nil {
		p.onResult(res)
	}
}

// publishPlanes publishes the planes' statuses as they are now, with
// every endpoint's document as last published: what a plane going down
// needs at once. The full computation follows, and publishes again only
// if it changed anything else.
func (p *Publisher) publishPlanes(ctx context.Context, w *writer) (bool, error) {
	start := time.Now()
	var queued time.Duration // from TriggerNow to here
	if at := p.urgentAt.Swap(0); at != 0 {
		queued = start.Sub(time.Unix(0, at))
	}
	// Only on a complete publication that etcd still holds as written:
	// no failed update, no drift, no orphan to repair first.
	if w.lastIn == nil || w.content == nil || w.genKey != w.generation {
		return false, nil
	}
	planes, ok := p.planesNow()
	if !ok {
		return false, nil
	}
	computed := time.Since(start)
	res, err := w.publishPlanes(ctx, planes)
	if err != nil {
		if errors.Is(err, ErrGenerationExhausted) {
			return false, nil // the full computation refuses it too, and says so
		}
		return false, err
	}
	if res.Written == 0 {
		return true, nil // etcd has them already: the rest waits as well
	}
	res.Compute = computed
	p.record(res)
	p.logger.Info("planes published ahead of the computation", "generation", res.Generation, "written", res.Written,
		"bytes", res.Bytes, "since_trigger", queued, "compute", res.Compute, "write", res.Duration)
	return true, nil
}

// publishPlanes writes the planes key with planes, and the generation key,
// in one transaction; the rest of the last complete publication stays.
func (w *writer) publishPlanes(ctx context.Context, planes []contract.PlaneStatus) (Result, error) {
	start := time.Now()
	if w.generation >= MaxGeneration {
		return Result{}, ErrGenerationExhausted
	}
	in := *w.lastIn
	in.Output.Planes = planes
	d := &planesDoc{Schema: contract.SchemaVersion, Planes: planes}
	content, err := json.Marshal(d)
	if err != nil {
		return Result{}, fmt.Errorf("publish: encode %s: %w", contract.KeyPlanes, err)
	}
	if bytes.Equal(content, w.content[contract.KeyPlanes]) {
		return Result{Generation: w.generation}, nil
	}
	gen := w.generation + 1
	d.setGeneration(gen)
	doc, _ := json.Marshal(d)
	ops := []op{{key: contract.KeyPlanes, doc: doc}}
	genDoc, _ := json.Marshal(w.generationDoc(gen, in, ops))
	err = w.txn(ctx, []clientv3.Op{clientv3.OpPut(contract.KeyPlanes, string(doc)), clientv3.OpPut(contract.KeyGeneration, string(genDoc))})
	if err != nil {
		w.content, w.lastIn = nil, nil
		return Result{}, err
	}
	w.content[contract.KeyPlanes] = content
	w.gens[contract.KeyPlanes] = gen
	w.generation, w.genKey, w.genRaw, w.lastIn = gen, gen, genDoc, &in
	w.p.highest.Store(gen)
	return Result{Generation: gen, Written: 2, Txns: 1, Bytes: len(contract.KeyPlanes) + len(doc) + len(contract.KeyGeneration) + len(genDoc),
		Duration: time.Since(start)}, nil
}

// generationDoc is the generation key of an update writing ops: the
// planes, and the endpoints whose document ops write or delete.
func (w *writer) generationDoc(gen uint64, in Input, ops []op) contract.GenerationDoc {
	planesGen := w.gens[contract.KeyPlanes]
	changed := map[string]bool{}
	for _, o := range ops {
		if name, ok := strings.CutPrefix(o.key, contract.PrefixEndpoints); ok {
			changed[name] = true
		}
		if o.key == contract.KeyPlanes {
			planesGen = gen
		}
	}
	doc := contract.GenerationDoc{Schema: contract.SchemaVersion, Generation: gen, ComputedAt: time.Now().UTC(),
		TopologyRevision: in.TopologyRevision, Leader: w.p.cfg.ID, Planes: in.Output.Planes, PlanesGeneration: planesGen,
		StatusSpreadMS: statusSpreadMS(len(in.Output.Endpoints), w.p.cfg.StatusWriteRate)}
	if len(changed) > contract.MaxChanged {
		doc.ChangedAll = true
		return doc
	}
	for name := range changed {
		doc.Changed = append(doc.Changed, name)
	}
	slices.Sort(doc.Changed)
	return doc
}

// statusSpreadMS spreads the status writes of n agents at rate a second.
func statusSpreadMS(n, rate int) int64 {
	return min(int64(n)*1000/int64(rate), contract.MaxStatusSpreadMS)
}

// attempt runs op with AttemptTimeout, again after a failure, until it
// succeeds, ctx ends or the leader's session does (then the last error).
// An attempt that failed after its transaction committed is repeated
// harmlessly: it writes the same documents again.
func (w *writer) attempt(ctx context.Context, op func(context.Context) error) error {
	for {
		actx, cancel := context.WithTimeout(ctx, w.p.cfg.AttemptTimeout)
		err := op(actx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		w.p.logger.Warn("etcd request failed; trying again while leader", "err", err)
		select {
		case <-w.alive:
			return err
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (w *writer) txn(ctx context.Context, ops []clientv3.Op) error {
	var resp *clientv3.TxnResponse
	err := w.attempt(ctx, func(ctx context.Context) (err error) {
		resp, err = w.p.cli.Txn(ctx).If(w.guard).Then(ops...).Commit()
		return err
	})
	if err != nil {
		return fmt.Errorf("publish: write: %w", err)
	}
	if !resp.Succeeded {
		return ErrLostLeadership
	}
	w.mu.Lock()
	w.own[resp.Header.Revision] = true
	w.mu.Unlock()
	return nil
}
