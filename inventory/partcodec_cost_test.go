package inventory

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
)

// The part codec's cost in what it allocates on the node (Lua's own
// count, collectgarbage('count'), with the collector stopped: the same
// on a busy machine as on an idle one, unlike a time): part_put of a
// pending stock part allocates nothing per field (no table of the fields,
// no string per field once the strings exist; what is left is SET's
// reply), and part_read one table, sized once for a pending part's twelve
// fields. The first codec's part_put built a table of the 18 fields (696
// bytes a call).
func TestPartCodecAllocates(t *testing.T) {
	srv := redistest.StartN(t, 1, redistest.Options{})[0]
	c := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	measure := redis.NewScript(`
local partPrefix = ARGV[1]
` + preludeFor(partCodecLua) + partCodecLua + `
local key = KEYS[1]
local rec = {state = 'pending', kind = 's', order = ARGV[2], token = ARGV[3], sku = ARGV[4], qty = '1', item = '0',
  counter = ARGV[5], redo = ARGV[6], offset = '1234', deadline = '1795000000000', at = '1794999990000'}
part_put(key, rec)
local got = part_read(key) -- every string the loops make exists from here on
collectgarbage('stop')
local a = collectgarbage('count')
for i = 1, 100 do part_put(key, rec) end
local b = collectgarbage('count')
for i = 1, 100 do got = part_read(key) end
local e = collectgarbage('count')
collectgarbage('restart')
return {math.floor((b - a) * 1024 / 100), math.floor((e - b) * 1024 / 100), got.sku}
`)
	id := stockPartID("o-1", "ab12cd34ef56", 0)
	v, err := measure.Run(ctx, c, []string{partKey(id)}, partKeyPrefix, "o-1", "ab12cd34ef56", "mem-1",
		stockKey("all", "mem-1"), RedoLogKey(3)).Slice()
	if err != nil || len(v) != 3 {
		t.Fatalf("measuring the codec: %v, %v", v, err)
	}
	put, get := v[0].(int64), v[1].(int64)
	t.Logf("bytes allocated a call: part_put %d, part_read %d", put, get)
	if v[2] != "mem-1" {
		t.Fatalf("part_read read sku %v, want mem-1", v[2])
	}
	if put > 256 {
		t.Errorf("part_put allocates %d bytes a call, want at most 256 (SET's reply; nothing per field)", put)
	}
	if get > 1024 {
		t.Errorf("part_read allocates %d bytes a call, want at most 1024 (one table of 12 fields)", get)
	}
}
