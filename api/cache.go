package api

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/common/expfmt"
)

// Unauthenticated routes that do real work answer from a result at most
// this old, so a flood of them costs one computation a second.
const openRouteCacheTTL = time.Second

// memo keeps one result for ttl; concurrent callers wait for one computation.
type memo[T any] struct {
	mu  sync.Mutex
	at  time.Time
	val T
	ttl time.Duration
}

func (m *memo[T]) get(compute func() T) T {
	m.mu.Lock()
	defer m.mu.Unlock()
	if now := time.Now(); m.at.IsZero() || now.Sub(m.at) >= m.ttl {
		m.val, m.at = compute(), now
	}
	return m.val
}

type metricsPage struct {
	body []byte
	err  error
}

// metrics serves /metrics in the text format from a gathering at most a
// second old.
func (s *Server) metricsHandler() gin.HandlerFunc {
	m := &memo[metricsPage]{ttl: openRouteCacheTTL}
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	return func(c *gin.Context) {
		page := m.get(func() metricsPage {
			mfs, err := s.deps.Registry.Gather()
			var buf bytes.Buffer
			enc := expfmt.NewEncoder(&buf, format)
			for _, mf := range mfs {
				if err == nil {
					err = enc.Encode(mf)
				}
			}
			return metricsPage{body: buf.Bytes(), err: err}
		})
		if page.err != nil {
			s.deps.Logger.Error("gathering metrics failed", "err", page.err)
			fail(c, &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "gathering metrics failed; see the fabricd log"})
			return
		}
		c.Data(http.StatusOK, string(format), page.body)
	}
}

// readiness checks the stores at most once a second.
func (s *Server) readiness() func(context.Context) error {
	m := &memo[error]{ttl: openRouteCacheTTL}
	return func(ctx context.Context) error {
		return m.get(func() error {
			if s.deps.Ready == nil {
				return nil
			}
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
			defer cancel()
			err := s.deps.Ready(ctx)
			if err != nil { // at most once a second, however often /readyz is asked
				s.deps.Logger.Warn("not ready", "err", err)
			}
			return err
		})
	}
}
