package service

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/shardis/shardis/config"
)

// With a token set, a call without it is refused with unauthenticated
// whatever its body: before, connect decoded the body first, so a
// stranger's malformed JSON was answered invalid_argument (and a chunked
// body was read into memory) before the token was looked at.
func TestAuthBeforeBody(t *testing.T) {
	s, _ := startService(t, func(cfg *config.Config) { cfg.Service.AuthToken = "s3cret" })
	url := "http://" + s.Addr() + "/shardis.v1.InventoryService/GetStock"
	for _, c := range []struct {
		name, auth, body string
		chunked          bool
		want             int
	}{
		{"no token, malformed body", "", `{"routeKey":`, false, http.StatusUnauthorized},
		{"no token, malformed body, chunked", "", `{"routeKey":`, true, http.StatusUnauthorized},
		{"wrong token, good body", "Bearer nope", `{"routeKey":"all","skuId":"x"}`, false, http.StatusUnauthorized},
		{"token, malformed body", "Bearer s3cret", `{"routeKey":`, false, http.StatusBadRequest},
	} {
		var body io.Reader = strings.NewReader(c.body)
		if c.chunked {
			body = io.MultiReader(body) // no length known: sent chunked
		}
		req, err := http.NewRequest(http.MethodPost, url, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != c.want {
			t.Errorf("%s: HTTP %d %s, want %d", c.name, res.StatusCode, got, c.want)
		}
		if c.want == http.StatusUnauthorized && !strings.Contains(string(got), `"code":"unauthenticated"`) {
			t.Errorf("%s: body %s, want code unauthenticated", c.name, got)
		}
	}
}
