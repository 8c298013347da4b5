// Package lint holds tests that check repository conventions which go vet
// does not: every package has exactly one package doc comment.
package lint
