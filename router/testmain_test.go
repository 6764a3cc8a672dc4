package router_test

import (
	"testing"

	"github.com/shardis/shardis/internal/redistest"
)

// TestMain starts the examples' two throwaway nodes (redistest.ExamplesMain).
func TestMain(m *testing.M) { redistest.ExamplesMain(m, "Example", "ExampleRouter_Pick") }
