// Package lint holds checks over the repository's own source that run as
// tests with `make test`: complexity_test.go (no function over a
// cyclomatic complexity of 20) and doc_test.go (every exported identifier
// documented). It has no API.
package lint
