package api

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/multiplane/multiplane/history"
	"github.com/multiplane/multiplane/planes"
)

func (s *Server) getLink(c *gin.Context) {
	if snap, ok := s.snapshot(c); ok {
		getByName(c, "link", snap.Links, func(l planes.Link) string { return l.Name },
			func(l planes.Link) any { return planes.LinkStatusOf(l, s.deps.Health) })
	}
}

// seriesQuery reads since (an RFC 3339 time, or a duration back from
// now; default 10m) and step (1s, or 1m for the per-minute averages).
func seriesQuery(c *gin.Context) (since time.Time, coarse bool, ok bool) {
	since = time.Now().Add(-10 * time.Minute)
	if v := c.Query("since"); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 && d <= 31*24*time.Hour {
			since = time.Now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			since = t
		} else {
			fail(c, badRequest("invalid_parameter", "since", "since must be a duration back from now (10m, 1h) or an RFC 3339 time"))
			return since, false, false
		}
	}
	switch c.Query("step") {
	case "", "1s":
	case "1m":
		coarse = true
	default:
		fail(c, badRequest("invalid_parameter", "step", "step must be 1s or 1m"))
		return since, false, false
	}
	return since, coarse, true
}

func (s *Server) planeSeries(c *gin.Context) {
	s.series(c, s.deps.History.Plane)
}

func (s *Server) linkSeries(c *gin.Context) {
	s.series(c, s.deps.History.Link)
}

func (s *Server) series(c *gin.Context, get func(string, time.Time, bool) (history.Columns, error)) {
	if s.deps.History == nil {
		fail(c, &Error{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "this server keeps no history"})
		return
	}
	since, coarse, ok := seriesQuery(c)
	if !ok {
		return
	}
	cols, err := get(c.Param("name"), since, coarse)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, cols)
}
