package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/multiplane/multiplane/contract"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/metadata"
)

// Sources of the applied document, as reported in the status.
const (
	SourceNone = ""
	SourceEtcd = "etcd"
	SourceLKG  = "last-known-good"
)

// Error categories in the status, in the order they are reported.
var errKinds = []string{"generation", "document", "apply", "rates", "address", "lkg", "lkg-save"}

// etcd call timeouts.
const (
	readTimeout  = 5 * time.Second
	writeTimeout = 3 * time.Second
	minBackoff   = 100 * time.Millisecond
	maxBackoff   = 3 * time.Second
)

// ErrRunning is returned by Run when the agent already runs.
var ErrRunning = errors.New("agent: already running")

// Agent keeps one endpoint's transport configured from etcd.
type Agent struct {
	cfg     Config
	applier Applier
	logger  *slog.Logger
	planes  int
	keyGen  string
	keyDoc  string
	keyStat string
	lkgPath string
	save    func(path string, doc contract.EndpointDoc, now time.Time) error // saveLKG; tests inject failures
	running atomic.Bool
	kick    chan struct{} // refresh the status now
	// fleetSpread is the status spread the last generation asked for, in
	// ms (contract.GenerationDoc.StatusSpreadMS).
	fleetSpread atomic.Int64

	// Progress, for tests and diagnostics: successful reads, and the
	// etcd revision up to which each key has been processed.
	reads, genRev, docRev atomic.Int64
	ctr                   counters

	mu        sync.Mutex
	applied   contract.EndpointDoc // valid when applied.Generation > 0
	appliedAt time.Time
	source    string
	failedGen uint64            // generation whose Apply failed; not retried
	unsaved   uint64            // generation applied but whose last-known-good save failed; retried
	errs      map[string]string // kind → message
}

// New returns an agent for cfg that applies documents with applier.
func New(cfg Config, applier Applier, logger *slog.Logger) (*Agent, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if applier == nil {
		return nil, fmt.Errorf("%w: no applier", ErrConfig)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	planes := cfg.Planes
	if pc, ok := applier.(planeCounter); ok && planes == 0 {
		planes = pc.Planes()
	}
	a := &Agent{
		cfg: cfg, applier: applier, planes: planes,
		logger:  logger.With("component", "agent", "endpoint", cfg.Endpoint),
		keyGen:  contract.KeyGeneration,
		keyDoc:  contract.KeyEndpoint(cfg.Endpoint),
		keyStat: contract.KeyStatus(cfg.Endpoint),
		kick:    make(chan struct{}, 1),
		errs:    map[string]string{},
		save:    saveLKG,
	}
	if cfg.StateDir != "" {
		a.lkgPath = LKGPath(cfg.StateDir, cfg.Endpoint)
	}
	return a, nil
}

// Endpoint is the endpoint's name.
func (a *Agent) Endpoint() string { return a.cfg.Endpoint }

// Run applies the last known good document, then follows etcd and reports
// the status until ctx is done. It returns nil when ctx ends, or an error
// when it cannot start (a bad etcd TLS configuration); an unreachable etcd
// is not an error: the agent keeps the applied configuration and retries.
// On return the status lease is revoked (or the status deleted when the
// lease is shared), best effort.
func (a *Agent) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer a.running.Store(false)
	a.applyLKG()

	if a.cfg.Client != nil {
		a.follow(ctx, a.cfg.Client)
		return nil
	}
	for {
		cli, err := a.dial(ctx)
		if err != nil {
			return err
		}
		var redial <-chan struct{}
		if a.cfg.Redial != nil {
			redial = a.cfg.Redial()
		}
		fctx, stop := context.WithCancel(ctx)
		go func() {
			select {
			case <-redial:
				stop()
			case <-fctx.Done():
			}
		}()
		a.follow(fctx, cli)
		stop()
		cli.Close()
		if ctx.Err() != nil {
			return nil
		}
		// A connection keeps the certificate it was made with: new
		// credentials (enrolled again after a revocation) need new ones.
		a.logger.Info("credentials replaced; reconnecting to etcd")
	}
}

// follow watches and reports over cli until ctx ends.
func (a *Agent) follow(ctx context.Context, cli *clientv3.Client) {
	var wg sync.WaitGroup
	wg.Go(func() { a.reportLoop(ctx, cli) })
	a.watchLoop(ctx, cli)
	wg.Wait()
}

// dial creates a client; it does not wait for etcd to answer.
func (a *Agent) dial(ctx context.Context) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints: a.cfg.EtcdEndpoints, DialTimeout: a.cfg.EtcdDialTimeout,
		Context: context.WithoutCancel(ctx), Logger: zap.NewNop(),
		DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 3 * time.Second,
	}
	if a.cfg.EtcdTLS != nil {
		cfg.TLS = a.cfg.EtcdTLS
	} else if a.cfg.EtcdCAFile != "" || a.cfg.EtcdCertFile != "" {
		info := transport.TLSInfo{TrustedCAFile: a.cfg.EtcdCAFile, CertFile: a.cfg.EtcdCertFile, KeyFile: a.cfg.EtcdKeyFile}
		tlsCfg, err := info.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("agent: etcd TLS: %w", err)
		}
		cfg.TLS = tlsCfg
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("agent: etcd client: %w", err)
	}
	return cli, nil
}

// applyLKG applies the document saved on disk, if any.
func (a *Agent) applyLKG() {
	if a.lkgPath == "" {
		return
	}
	doc, ok, err := loadLKG(a.lkgPath, a.cfg.Endpoint, a.planes)
	if err != nil {
		a.logger.Warn("last-known-good ignored", "path", a.lkgPath, "err", err)
		a.setErr("lkg", err.Error())
		return
	}
	if !ok {
		a.logger.Info("no last-known-good document", "path", a.lkgPath)
		return
	}
	a.apply(doc, SourceLKG)
}

// watchState is what the agent last read from etcd: the generation
// document (the planes and the endpoints its generation changed) and the
// endpoint's own document, which it resolves together
// (contract.Configuration). Two watches deliver them in no common order,
// so the agent applies a pair only when it knows it is one complete
// generation's, by etcd revisions: the own document was written no later
// than the generation key (which fabricd writes last), and, when a
// generation key named the endpoint as changed, no earlier than the
// generation key before it (needRev). A generation that changed too many
// endpoints to name them (ChangedAll), or that follows a refused one,
// makes the agent read its document as of the generation key (readAt).
type watchState struct {
	gen     *contract.GenerationDoc // the latest valid generation document
	genRev  int64                   // the revision it was written at
	spec    *contract.EndpointSpec  // the latest valid own document (nil: none, deleted or rejected)
	specRev int64                   // the revision of the own document's latest event
	needRev int64                   // the own document must be written at or after this revision
	readAt  int64                   // read the own document at this revision before evaluating (0: no)
	refused bool                    // a generation key was refused: what it changed is unknown
}

// watchLoop reads both keys and watches them from the next revision, and
// does it again whenever the watch fails (compaction, lost leader, closed
// stream).
func (a *Agent) watchLoop(ctx context.Context, cli *clientv3.Client) {
	backoff := minBackoff
	pause := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff/2 + rand.N(backoff)): // jittered: agents sharing a process or an etcd do not retry in step
		}
		backoff = min(2*backoff, maxBackoff)
		return true
	}
	down := false
	for ctx.Err() == nil {
		st, rev, err := a.read(ctx, cli)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !down {
				a.logger.Warn("etcd unreachable; keeping the applied configuration", "err", err)
				down = true
			}
			if !pause() {
				return
			}
			continue
		}
		if down {
			a.logger.Info("etcd reachable again", "revision", rev)
			down = false
		}
		a.evaluate(st)
		began := time.Now()
		err = a.watch(ctx, cli, st, rev)
		if ctx.Err() != nil {
			return
		}
		a.logger.Info("watch ended; reading again", "revision", rev, "err", err)
		if time.Since(began) > 2*time.Second {
			backoff = minBackoff
		} else if !pause() { // a watch failing at once must not spin
			return
		}
	}
}

// read gets the generation key and the document at one revision: a
// consistent pair, whatever the generation key names.
func (a *Agent) read(ctx context.Context, cli *clientv3.Client) (*watchState, int64, error) {
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	resp, err := cli.Txn(rctx).Then(clientv3.OpGet(a.keyGen), clientv3.OpGet(a.keyDoc)).Commit()
	if err != nil {
		return nil, 0, err
	}
	st := &watchState{}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		a.onGeneration(st, kvs[0].Value, kvs[0].ModRevision)
	}
	st.needRev, st.readAt, st.refused = 0, 0, false // read with the document: nothing to wait for
	kvs := resp.Responses[1].GetResponseRange().Kvs
	if len(kvs) > 0 {
		a.onDocument(st, kvs[0].Value, true, kvs[0].ModRevision)
	} else {
		a.onDocument(st, nil, false, 0)
	}
	a.reads.Add(1)
	a.genRev.Store(resp.Header.Revision)
	a.docRev.Store(resp.Header.Revision)
	return st, resp.Header.Revision, nil
}

// readDocumentAt reads the endpoint's document as it was at st.readAt, the
// latest generation key's revision: it is then that generation's.
func (a *Agent) readDocumentAt(ctx context.Context, cli *clientv3.Client, st *watchState) error {
	rev := st.readAt
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	resp, err := cli.Get(rctx, a.keyDoc, clientv3.WithRev(rev))
	if err != nil {
		return fmt.Errorf("agent: read own document at revision %d: %w", rev, err)
	}
	a.reads.Add(1)
	st.readAt, st.needRev = 0, 0
	if st.specRev > rev {
		return nil // the watch already delivered a later one, of a later generation
	}
	if len(resp.Kvs) > 0 {
		a.onDocument(st, resp.Kvs[0].Value, true, resp.Kvs[0].ModRevision)
	} else {
		a.onDocument(st, nil, false, 0)
	}
	return nil
}

// watch follows both keys from rev+1 until the watch fails or ctx ends.
func (a *Agent) watch(ctx context.Context, cli *clientv3.Client, st *watchState, rev int64) error {
	// Its own gRPC watch stream per agent (clientv3 groups watches by the
	// context's metadata): agents sharing a client then do not queue
	// behind each other in one server-side stream buffer, which made
	// etcd treat them as slow watchers (victims) when thousands of agents
	// shared a few streams.
	wctx := metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx), "multiplane-watch", a.cfg.WatchStream)
	wctx, cancel := context.WithCancel(wctx)
	defer cancel()
	genCh := cli.Watch(wctx, a.keyGen, clientv3.WithRev(rev+1))
	docCh := cli.Watch(wctx, a.keyDoc, clientv3.WithRev(rev+1))
	for {
		var resp clientv3.WatchResponse
		var ok, isDoc bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-a.saveRetry():
			a.evaluate(st) // applies the unsaved generation again, then saves it
			continue
		case resp, ok = <-genCh:
		case resp, ok = <-docCh:
			isDoc = true
		}
		if !ok {
			return errors.New("agent: watch closed")
		}
		if err := resp.Err(); err != nil {
			return err
		}
		for _, ev := range resp.Events {
			switch {
			case isDoc:
				a.onDocument(st, ev.Kv.Value, ev.Type == clientv3.EventTypePut, ev.Kv.ModRevision)
			case ev.Type == clientv3.EventTypePut:
				a.onGeneration(st, ev.Kv.Value, ev.Kv.ModRevision)
			}
		}
		if st.readAt != 0 {
			if err := a.readDocumentAt(ctx, cli, st); err != nil {
				return err // read everything again
			}
		}
		a.evaluate(st)
		if n := len(resp.Events); n > 0 {
			if rev := resp.Events[n-1].Kv.ModRevision; isDoc {
				a.docRev.Store(rev)
			} else {
				a.genRev.Store(rev)
			}
		}
	}
}

// onGeneration takes a new value of the generation key, written at rev.
func (a *Agent) onGeneration(st *watchState, value []byte, rev int64) {
	var g contract.GenerationDoc
	err := json.Unmarshal(value, &g)
	if err == nil {
		err = g.Validate()
	}
	if err != nil {
		a.logger.Warn("fabric generation refused; keeping the applied configuration", "err", err)
		a.setErr("generation", fmt.Sprintf("fabric generation key: %v", err))
		st.refused = true // hold until a valid one, then read the document as of it
		return
	}
	a.setErr("generation", "")
	a.fleetSpread.Store(g.StatusSpreadMS)
	switch {
	case st.refused || st.readAt != 0 || g.ChangedAll:
		st.readAt, st.refused = rev, false
	case slices.Contains(g.Changed, a.cfg.Endpoint):
		st.needRev = max(st.needRev, st.genRev+1) // written after the previous generation key
	}
	st.gen, st.genRev = &g, rev
}

// onDocument takes a new value of the endpoint's document, written at rev:
// a valid one is kept, a bad one is rejected and the applied one stays.
func (a *Agent) onDocument(st *watchState, value []byte, present bool, rev int64) {
	st.spec, st.specRev = nil, rev
	if !present {
		a.mu.Lock()
		has := a.applied.Generation > 0
		a.mu.Unlock()
		if has {
			a.logger.Warn("endpoint document deleted; keeping the applied configuration")
			a.setErr("document", "endpoint document is missing from etcd; keeping the applied configuration")
		}
		return
	}
	var doc contract.EndpointSpec
	err := json.Unmarshal(value, &doc)
	if err == nil {
		err = doc.Validate(a.cfg.Endpoint, a.planes)
	} else {
		err = fmt.Errorf("%w: %v", contract.ErrInvalidDocument, err)
	}
	if err != nil {
		a.logger.Warn("endpoint document rejected; keeping the applied configuration", "generation", doc.Generation, "err", err)
		a.setErr("document", fmt.Sprintf("rejected document generation %d: %v", doc.Generation, err))
		a.ctr.rejected.Add(1)
		return
	}
	st.spec = &doc
}

// evaluate applies the endpoint's document resolved with the planes once
// both are known to belong to one complete generation.
func (a *Agent) evaluate(st *watchState) {
	g, s := st.gen, st.spec
	if g == nil || s == nil || st.refused || st.readAt != 0 || st.specRev > st.genRev || st.specRev < st.needRev {
		return
	}
	doc := contract.Configuration(*s, *g)
	err := contract.CheckPlanes(*s, g.Planes)
	if err == nil {
		err = doc.Validate(a.cfg.Endpoint, a.planes)
	}
	if err != nil {
		a.logger.Warn("configuration rejected; keeping the applied one", "generation", doc.Generation, "err", err)
		a.setErr("document", fmt.Sprintf("rejected configuration generation %d: %v", doc.Generation, err))
		return
	}
	a.mu.Lock()
	failed := a.failedGen == doc.Generation
	a.mu.Unlock()
	if !failed {
		a.apply(doc, SourceEtcd)
	}
}

// apply applies a valid document in one Applier call, saves it as the last
// known good one (when it came from etcd), and only then publishes it as
// applied; the same generation twice is a no-op.
func (a *Agent) apply(doc contract.EndpointDoc, source string) {
	a.mu.Lock()
	if a.applied.Generation == doc.Generation {
		changed := a.source != source
		a.source = source
		a.errs["document"] = ""
		a.mu.Unlock()
		if changed {
			a.kickStatus()
		}
		return
	}
	a.mu.Unlock()

	err := a.applier.Apply(doc)
	now := time.Now()
	if err != nil && !errors.Is(err, ErrNotEnforced) {
		a.logger.Error("apply failed; keeping the applied configuration", "generation", doc.Generation, "err", err)
		a.mu.Lock()
		a.failedGen = doc.Generation
		a.ctr.applyErrors.Add(1)
		a.errs["apply"] = fmt.Sprintf("apply generation %d: %v", doc.Generation, err)
		a.mu.Unlock()
		a.kickStatus()
		return
	}
	// Persist before publishing: the status, the metrics, the log and
	// OnApplied must never claim a generation that a crash now would lose
	// (the agent would come back on the older file). If the file cannot be
	// written the transport keeps the new document but the agent does not
	// report it as applied; the watch loop retries (unsaved).
	lkgSaved := false
	if source == SourceEtcd && a.lkgPath != "" {
		if serr := a.save(a.lkgPath, doc, now); serr != nil {
			a.logger.Error("last-known-good not saved; generation not reported as applied", "generation", doc.Generation, "err", serr)
			a.mu.Lock()
			a.unsaved = doc.Generation
			a.mu.Unlock()
			a.setErr("lkg-save", fmt.Sprintf("generation %d applied to the transport but not saved, so not reported as applied: %v", doc.Generation, serr))
			return
		}
		lkgSaved = true
	}
	a.mu.Lock()
	a.applied, a.appliedAt, a.source, a.unsaved = doc, now, source, 0
	a.errs["document"], a.errs["apply"], a.errs["rates"] = "", "", ""
	if err != nil {
		a.errs["rates"] = err.Error()
	}
	if lkgSaved {
		a.errs["lkg-save"], a.errs["lkg"] = "", ""
	}
	a.errs["address"] = a.addressMismatch(doc)
	a.mu.Unlock()
	if source == SourceLKG {
		a.ctr.appliesLKG.Add(1)
	} else {
		a.ctr.appliesEtcd.Add(1)
	}
	a.logger.Info("applied", "generation", doc.Generation, "source", source, "planes", len(doc.PathSet.Planes))
	if err != nil {
		a.logger.Warn("applied in part", "generation", doc.Generation, "err", err)
	}
	if a.cfg.OnApplied != nil {
		a.cfg.OnApplied(doc.Generation, now)
	}
	a.kickStatus()
}

// saveRetry is when the watch loop next retries an unsaved generation
// (nil, never, when there is none).
func (a *Agent) saveRetry() <-chan time.Time {
	a.mu.Lock()
	unsaved := a.unsaved
	a.mu.Unlock()
	if unsaved == 0 {
		return nil
	}
	return time.After(a.cfg.StatusInterval)
}

// addressMismatch describes the planes whose address in doc is not the
// local one (Config.Addresses), or returns "".
func (a *Agent) addressMismatch(doc contract.EndpointDoc) string {
	var bad []string
	for _, p := range doc.PathSet.Planes {
		if p.Index < 0 || p.Index >= len(a.cfg.Addresses) {
			continue
		}
		if got, err := netip.ParseAddr(p.Address); err == nil && got != a.cfg.Addresses[p.Index] {
			bad = append(bad, fmt.Sprintf("plane %s: document %s, local %s", p.Plane, got, a.cfg.Addresses[p.Index]))
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return "generation " + fmt.Sprint(doc.Generation) + " addresses differ from this host's: " + strings.Join(bad, "; ")
}

func (a *Agent) setErr(kind, msg string) {
	a.mu.Lock()
	changed := a.errs[kind] != msg
	a.errs[kind] = msg
	a.mu.Unlock()
	if changed {
		a.kickStatus()
	}
}

func (a *Agent) kickStatus() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Status is the agent's current status, as it reports it to etcd (the
// per-path counters are read from the Applier).
func (a *Agent) Status() contract.StatusDoc {
	s := a.status()
	s.Paths = a.applier.Stats()
	return s
}

func (a *Agent) status() contract.StatusDoc {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := contract.StatusDoc{
		Schema: contract.SchemaVersion, Endpoint: a.cfg.Endpoint, AppliedGeneration: a.applied.Generation,
		AppliedAt: a.appliedAt, Source: a.source, Version: a.cfg.Version,
	}
	for _, k := range errKinds {
		if m := a.errs[k]; m != "" {
			s.Errors = append(s.Errors, m)
		}
	}
	return s
}
