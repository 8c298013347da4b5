// Package web is fabricd's dashboard: a single page, embedded in the binary
// with uPlot (static/vendor, the build package.json pins), served at / by
// the API server. It asks for an API token (kept in the browser's local
// storage), shows planes, switches, drains and events, a page per plane
// and per endpoint, through the REST API, and follows /api/v1/stream for
// live changes.
//
//	mux.Handle("/", web.Handler())
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Handler serves the dashboard's files.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; connect-src 'self'; style-src 'self'; script-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Frame-Options", "DENY") // for browsers without frame-ancestors
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		files.ServeHTTP(w, r)
	})
}
