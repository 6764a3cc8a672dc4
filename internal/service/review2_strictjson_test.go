package service

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
)

// TestReview2StrictJSONWithCharset holds JSON's strictness (README, RPC
// API: "A JSON request carrying a field the API does not define ("user"
// for "userId") is refused with invalid_argument naming the field";
// codec.go) to every spelling of the JSON Content-Type the service
// accepts. connect-go serves "application/json; charset=utf-8" with a
// codec of its own ("json; charset=utf-8"), which drops unknown fields:
// before, such a request reserved the order without its user, as if the
// misspelt field were absent.
func TestReview2StrictJSONWithCharset(t *testing.T) {
	s, _ := startService(t, func(cfg *config.Config) {})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.Inv.LoadStock(ctx, "all", "hat", 5, 0); err != nil {
		t.Fatal(err)
	}
	url := "http://" + s.Addr() + "/shardis.v1.InventoryService/Reserve"
	for i, ct := range []string{"application/json", "application/json; charset=utf-8", "application/json;charset=UTF-8"} {
		body := `{"orderId":"o-` + string(rune('a'+i)) + `","user":"bob","items":[{"routeKey":"all","skuId":"hat","quantity":"1"}]}`
		code, res := review2Post(ctx, t, url, ct, nil, []byte(body))
		if code != http.StatusBadRequest || !strings.Contains(res, "invalid_argument") || !strings.Contains(res, `\"user\"`) {
			t.Errorf("Content-Type %q, unknown field \"user\": HTTP %d %s, want 400 invalid_argument naming the field", ct, code, res)
		}
	}
	level, err := s.Inv.GetStock(ctx, "all", "hat")
	if err != nil {
		t.Fatal(err)
	}
	if level.Reserved != 0 {
		t.Errorf("%d units reserved by requests that should have been refused", level.Reserved)
	}
}
