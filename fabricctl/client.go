package fabricctl

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// APIError is fabricd's answer to a refused or failed request.
type APIError struct {
	Status  int
	Code    string
	Message string
	Field   string
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
	if e.Field != "" {
		msg += " (field " + e.Field + ")"
	}
	return msg
}

// ErrUnreachable wraps failures to reach fabricd at all (connection, TLS,
// timeout): exit code 3.
var ErrUnreachable = errors.New("fabricctl: fabricd unreachable")

// maxResponse bounds what fabricctl reads of one answer.
const maxResponse = 64 << 20

// Client calls fabricd's REST API with a bearer token.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// NewClient returns a client of the API at server (http:// or https://),
// trusting caFile (PEM) in addition to the system's roots when given.
func NewClient(server, token, caFile string, timeout time.Duration) (*Client, error) {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--server %q: want http://HOST:PORT or https://HOST:PORT", server)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s: no PEM certificate in it", caFile)
		}
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	}
	return &Client{base: strings.TrimRight(server, "/"), token: token, http: &http.Client{Transport: tr, Timeout: timeout}}, nil
}

// Do sends a request and decodes a JSON answer into out (nil: discard);
// an error status becomes an *APIError.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct{ Code, Message, Field string }
		}
		if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
			e.Error.Code, e.Error.Message = "http_error", strings.TrimSpace(string(data))
		}
		return &APIError{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message, Field: e.Error.Field}
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("fabricctl: %s %s: answer is not the JSON expected: %w", method, path, err)
	}
	return nil
}

// List gets every page of a list endpoint (path may carry a query).
func (c *Client) List(ctx context.Context, path string) ([]json.RawMessage, error) {
	var all []json.RawMessage
	cursor := ""
	for {
		p := path
		if cursor != "" {
			sep := "?"
			if strings.Contains(p, "?") {
				sep = "&"
			}
			p += sep + "cursor=" + url.QueryEscape(cursor)
		}
		var page struct {
			Items      []json.RawMessage `json:"items"`
			NextCursor string            `json:"next_cursor"`
		}
		if err := c.Do(ctx, http.MethodGet, p, nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.NextCursor == "" || page.NextCursor == cursor {
			return all, nil
		}
		cursor = page.NextCursor
	}
}
