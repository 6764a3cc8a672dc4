package node

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// RouteRedisLogs sends go-redis's internal log lines (dial failures and
// pool events, which it otherwise prints to stderr) to logger at debug
// level: shardis reports node failures itself. go-redis's logger is global
// to the process, so this is for programs, not libraries; call it once at
// startup.
func RouteRedisLogs(logger *slog.Logger) {
	redis.SetLogger(redisLogger{logger})
}

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}
