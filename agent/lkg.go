package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/multiplane/multiplane/contract"
	"github.com/multiplane/multiplane/internal/fsutil"
)

// lkgFile is the last-known-good document on disk.
type lkgFile struct {
	Generation uint64               `json:"generation"`
	SavedAt    time.Time            `json:"saved_at"`
	Document   contract.EndpointDoc `json:"document"`
}

// ErrCorruptLKG is wrapped when the last-known-good file cannot be used.
var ErrCorruptLKG = errors.New("agent: unusable last-known-good file")

// LKGPath is where the last known good document of endpoint is kept.
func LKGPath(stateDir, endpoint string) string {
	return filepath.Join(stateDir, endpoint+".lkg.json")
}

// loadLKG reads and validates the file; ok is false when there is none.
func loadLKG(path, endpoint string, planes int) (doc contract.EndpointDoc, ok bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return doc, false, nil
	}
	if err != nil {
		return doc, false, fmt.Errorf("%w: %s: %v", ErrCorruptLKG, path, err)
	}
	var f lkgFile
	if err := json.Unmarshal(data, &f); err != nil {
		return doc, false, fmt.Errorf("%w: %s: %v", ErrCorruptLKG, path, err)
	}
	if f.Generation != f.Document.Generation {
		return doc, false, fmt.Errorf("%w: %s: generation %d does not match its document's %d", ErrCorruptLKG, path, f.Generation, f.Document.Generation)
	}
	if err := f.Document.Validate(endpoint, planes); err != nil {
		return doc, false, fmt.Errorf("%w: %s: %v", ErrCorruptLKG, path, err)
	}
	return f.Document, true, nil
}

// saveLKG writes the document atomically (fsutil.WriteFile).
func saveLKG(path string, doc contract.EndpointDoc, now time.Time) error {
	data, err := json.MarshalIndent(lkgFile{Generation: doc.Generation, SavedAt: now.UTC(), Document: doc}, "", "  ")
	if err != nil {
		return fmt.Errorf("agent: last-known-good: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("agent: last-known-good: %w", err)
	}
	if err := fsutil.WriteFile(path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("agent: last-known-good: %w", err)
	}
	return nil
}
