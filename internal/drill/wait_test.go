package drill

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// stalledAdmin returns an admin client of a service that accepts every
// call and never answers (a stalled process), until the test ends.
func stalledAdmin(t *testing.T) shardisv1connect.AdminServiceClient {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	return shardisv1connect.NewAdminServiceClient(srv.Client(), srv.URL)
}

// WaitState returns at most limit after it starts, with an error naming
// the node, the state and the last call's error, even when the service
// accepts the call and never answers and the caller's context has no
// deadline (the drills pass context.Background()). Found by a review:
// each ListNodes ran on the caller's context alone, so WaitState hung
// forever on a stalled service.
func TestWaitStateBoundedByLimitOnStalledService(t *testing.T) {
	admin := stalledAdmin(t)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, _, err := WaitState(context.Background(), admin, "n1", v1.NodeState_NODE_STATE_DOWN, 200*time.Millisecond)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("WaitState succeeded against a service that never answers")
		}
		for _, want := range []string{"n1", "NODE_STATE_DOWN", "last ListNodes", "deadline"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("WaitState's error %q does not say %q", err, want)
			}
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("WaitState with limit 200ms has not returned after %v", time.Since(start).Round(time.Millisecond))
	}
}

// DownReason's call is bounded (5 s) when the caller's context is not:
// against a service that never answers it returns the call's error.
// Found by a review: it waited for as long as the caller's context, for a
// drill forever.
func TestDownReasonBoundedOnStalledService(t *testing.T) {
	admin := stalledAdmin(t)
	done := make(chan string, 1)
	go func() { done <- DownReason(context.Background(), admin, "n1") }()
	select {
	case got := <-done:
		if !strings.Contains(got, "deadline") {
			t.Fatalf("DownReason against a stalled service: %q, want the call's deadline error", got)
		}
	case <-time.After(downReasonLimit + 3*time.Second):
		t.Fatalf("DownReason has not returned %v after it started", downReasonLimit+3*time.Second)
	}
}
