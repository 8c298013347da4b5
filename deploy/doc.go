// Package deploy holds what runs Multiplane outside this repository: the
// systemd units (systemd/), the packaging files (packaging/) and the
// Kubernetes manifests (kubernetes/), with the tests that check them. It
// has no code of its own.
package deploy
