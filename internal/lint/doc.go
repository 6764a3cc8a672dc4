// Package lint holds checks over the repository's own source that run as
// tests with `make test` (complexity_test.go). It has no API.
package lint
