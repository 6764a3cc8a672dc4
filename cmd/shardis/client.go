package main

// Client subcommands: they call a running `shardis serve` over Connect.
// Every one shares the flags and the connection set up by client.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

const (
	defaultAddr    = "http://127.0.0.1:7400"
	tokenEnv       = "SHARDIS_TOKEN"
	followInterval = time.Second
)

// clientCommand is one subcommand that calls the service.
type clientCommand struct {
	synopsis string // the usage line after "shardis "
	help     string
	run      func(ctx context.Context, c *client, args []string) error
}

// clientCommands is keyed by command name ("stock load" for subcommands).
var clientCommands = map[string]clientCommand{
	"status": {"status [flags]",
		"Lists every node (state, breaker, failed probes, persistence settings, redo backlog, stuck parts, routes with drained ones marked), then the service's readiness, topology epoch and any pending configuration difference, and the deferred parts. When /readyz or /metrics cannot be read, their lines say unknown, the rest is printed, and it exits 1 (a node DOWN is a state it read: exit 0). With --json it prints the node list alone (ListNodes' response; the rest is /readyz's and /metrics', which it does not read), and exits 0 once it has it.", cmdStatus},
	"stock load": {"stock load [flags] --route R --sku S --qty N [--limit L]",
		"Adds N units of a SKU, split over the route's enabled nodes, and prints the stock. A load that failed on a node is an error naming the nodes that took their share; a load applied whose stock report could not read a node (a node DOWN, not loaded) prints the report, the totals partial, and exits 1 naming it, as stock get.", cmdStockLoad},
	"stock get": {"stock get [flags] --route R --sku S",
		"Prints a SKU's totals and per-node counters. When a node cannot be read, it is marked unreachable, the totals leave it out (partial), and after printing it exits 1 naming it.", cmdStockGet},
	"reserve": {"reserve [flags] --order O [--user U] [--ttl 30s] ROUTE:SKU:QTY...",
		"Reserves every item of an order, all or nothing (e.g. clothes:tshirt-1:2).", cmdReserve},
	"confirm": {"confirm [flags] ORDER", "Confirms a reserved order.", cmdConfirm},
	"cancel": {"cancel [flags] ORDER",
		"Cancels an order; an order never reserved gets a tombstone.", cmdCancel},
	"drain": {"drain [flags] [--force] NODE SERVER ROUTE",
		"Disables one route on one node (no new stock or reservations there). Draining the last enabled node of a route takes the route down: refused unless --force.",
		cmdDrain},
	"undrain": {"undrain [flags] NODE SERVER ROUTE", "Re-enables one route on one node.",
		func(ctx context.Context, c *client, args []string) error {
			rest, err := c.parse(args, 3, 3)
			if err != nil {
				return err
			}
			return setRouteEnabled(ctx, c, rest, true)
		}},
	"order-id": {"order-id [flags] [ROUTE...]",
		"Mints an order id whose record goes to a node that is up (given the order's route keys, the node serving most of them); store it, then reserve with it.", cmdOrderID},
	"redo-log": {"redo-log [flags] --node N --queue Q [--after OFFSET] [--limit 100] [--follow]",
		"Prints one redo-log queue of a node; Q is a number or a receipt's redo log name.\n" +
			"Subcommand: shardis redo-log ack [flags] --node N --queue Q OFFSET records a consumer's progress (redo-log ack -h).", cmdRedoLog},
	"redo-log ack": {"redo-log ack [flags] --node N --queue Q [--incarnation INC] [--part ID] OFFSET",
		"Records that a consumer applied queue Q of node N up to OFFSET (at most the last offset handed out), so settled entries up to it can be trimmed.\n" +
			"--incarnation INC (the incarnation redo-log printed with the entries) refuses the acknowledgement when the node is at another one (failed_precondition): without it, an acknowledgement of entries read before an accept lets the trim remove entries nobody read.\n" +
			"--part ID (the part of the entry at OFFSET) refuses it when the entry there now holds another part: the queue went back under the consumer (failed_precondition).", cmdRedoLogAck},
	"parts stuck": {"parts stuck [flags] [--node N] [--limit 1000]",
		"Lists parts the reconciler set aside because they cannot be settled, with the reason. Without --node, a node that cannot be read is named (unreachable: ...) and, after the list, the command exits 1: the list lacks its parts.", cmdPartsStuck},
	"node accept": {"node accept [flags] NODE",
		"Accepts the data of an inventory node refused for coming back empty or with older data (new incarnation; what it lost stays lost). A node that is UP is refused unless --force.", cmdNodeAccept},
	"parts retry": {"parts retry [flags] NODE PART_ID | --all | --sku SKU [--node N]",
		"Puts a stuck part (or every stuck part, or a SKU's, of every node or of --node) back in its node's pending index, due now (after repairing its data); the reconciler settles it. Stuck parts are also retried by themselves with backoff, and when their SKU is loaded. After printing what it did, --all and --sku exit 1 when a retry failed, a node could not be read (its parts were not retried: run it again once it is back) or a node has more stuck parts than one run looks at (10000: run it again).", cmdPartsRetry},
	"parts settle": {"parts settle [flags] [--route R --sku S --qty N [--user U]] NODE PART_ID confirm|cancel",
		"Confirms or cancels one stuck part whose order's record is gone (it lived out its retention), the one case the reconciler cannot decide: decide by the system of record, confirm if the order was paid (its units are sold), else cancel (they go back to available). Only such a part is settled: a part not stuck, or whose order's record exists (then run parts retry: the record decides), is refused (failed_precondition) and nothing changes. It prints the part's result, and exits 1 when the part was not settled as asked.\n" +
			"A stuck part whose own record is gone (lost while pending: its reason says its record is gone; pgsync's queue stops at it) is settled only with --route R --sku S --qty N, all three: the route, SKU and units its record held, read from the system of record (pgsync's stock_movements row of the part, the shop's order). Its node then moves N units of the SKU's stock from reserved to confirmed or available and writes the part's record settled, so pgsync lands it and its queue moves on. Refused, nothing changed: a part not stuck or whose record exists (failed_precondition: settle it without the three), N above the SKU's reserved units or out of range, an unknown route (invalid_argument), a SKU without stock on the node (data_loss). A wrong SKU or N moves other parts' units: check them.\n" +
			"A per-user quota part (id ORDER|TOKEN|q|ROUTE|SKU) whose own record is gone holds N units of its user's count against the SKU's limit: settle it with --route and --sku as its id names them, --qty N (the order's units of the SKU on the route) and --user U (the order's user). Cancel (the order was not paid) takes N off U's count, so U may buy them again; confirm keeps them. Refused, nothing changed: U's count on the node below N (another user, too many units, or a count a topology change moved to U's new quota node: take it off there by hand), a part id that is no quota part of R and S (invalid_argument). A cancel of a paid order's quota part lets U buy N units past the limit.", cmdPartsSettle},
}

// cmdClient runs a client subcommand until it ends or SIGINT/SIGTERM.
func cmdClient(name string, args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runClient(ctx, name, args, stdout, stderr)
}

// clientGroups are the client commands made of subcommands, with the
// subcommands in the order their usage lists them.
var clientGroups = map[string][]string{
	"stock": {"load", "get"},
	"parts": {"stuck", "retry", "settle"},
	"node":  {"accept"},
}

// runClient runs a client subcommand bounded by ctx.
func runClient(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	if subs, ok := clientGroups[name]; ok {
		if len(args) == 0 || !slices.Contains(subs, args[0]) {
			return groupUsage(name, subs, args, stderr)
		}
		name, args = name+" "+args[0], args[1:]
	}
	if name == "redo-log" && len(args) > 0 && args[0] == "ack" {
		name, args = name+" "+args[0], args[1:]
	}
	cmd, ok := clientCommands[name]
	if !ok {
		return fmt.Errorf("%w: unknown command %q", errUsage, name)
	}
	c := newClient(name, cmd, stdout, stderr)
	defer c.close()
	return cmd.run(ctx, c, args)
}

// groupUsage lists the subcommands of group. Asked for (-h, --help,
// help) it returns flag.ErrHelp (exit status 0); otherwise a usage error
// naming what is missing or unknown.
func groupUsage(group string, subs, args []string, stderr io.Writer) error {
	fmt.Fprintf(stderr, "usage: shardis %s %s [flags]\n\nsubcommands:\n", group, strings.Join(subs, "|"))
	for _, sub := range subs {
		cmd := clientCommands[group+" "+sub]
		fmt.Fprintf(stderr, "  shardis %s\n      %s\n", cmd.synopsis, cmd.help)
	}
	fmt.Fprintf(stderr, "\nRun \"shardis %s SUBCOMMAND -h\" for its flags.\n", group)
	switch {
	case len(args) > 0 && isHelp(args[0]):
		return flag.ErrHelp
	case len(args) == 0:
		return fmt.Errorf("%w: %s needs a subcommand: %s", errUsage, group, strings.Join(subs, " or "))
	default:
		return fmt.Errorf("%w: %s %q: unknown subcommand; want %s", errUsage, group, args[0], strings.Join(subs, " or "))
	}
}

// isHelp reports whether arg, a command group's first argument, asks for
// its help: -h, -help, --help or help (exit status 0 in every group).
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// client holds the common flags of a client subcommand and, once parsed,
// the service clients.
type client struct {
	fs       *flag.FlagSet
	synopsis string
	stderr   io.Writer
	addr     string
	base     string // the service's base URL, once parsed
	token    string
	timeout  time.Duration
	out      printer
	http     *http.Client
	inv      shardisv1connect.InventoryServiceClient
	admin    shardisv1connect.AdminServiceClient
}

// newClient is the client of command name ("stock load"), which its usage
// errors name.
func newClient(name string, cmd clientCommand, stdout, stderr io.Writer) *client {
	c := &client{synopsis: cmd.synopsis, stderr: stderr, out: printer{w: stdout}}
	c.fs = flag.NewFlagSet(name, flag.ContinueOnError)
	c.fs.SetOutput(stderr)
	c.fs.StringVar(&c.addr, "addr", defaultAddr, "service `URL` or host:port")
	c.fs.StringVar(&c.token, "token", "", "bearer `token` (default $"+tokenEnv+")")
	c.fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "deadline of each call")
	c.fs.BoolVar(&c.out.json, "json", false, "print responses as proto3 JSON, one object per line")
	c.fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: shardis %s\n%s\nFlags may come before or after the arguments (\"--\" ends them).\n", cmd.synopsis, cmd.help)
		c.fs.PrintDefaults()
	}
	return c
}

// usageErr prints the synopsis and returns a usage error (exit status 2).
func (c *client) usageErr(format string, args ...any) error {
	fmt.Fprintf(c.stderr, "usage: shardis %s\n", c.synopsis)
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

// parse parses args (flags anywhere among the arguments, until "--"),
// checks that the required flags were given and that between minArgs
// and maxArgs (-1: any number) arguments remain, and connects. It
// returns the arguments.
func (c *client) parse(args []string, minArgs, maxArgs int, required ...string) ([]string, error) {
	rest, err := parseInterspersed(c.fs, args)
	if err != nil {
		return nil, err
	}
	if len(rest) < minArgs || (maxArgs >= 0 && len(rest) > maxArgs) {
		return nil, c.usageErr("%s: wrong number of arguments (%d)", c.fs.Name(), len(rest))
	}
	set := map[string]bool{}
	c.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, n := range required {
		if !set[n] {
			return nil, c.usageErr("%s needs --%s", c.fs.Name(), n)
		}
	}
	if !set["token"] {
		c.token = os.Getenv(tokenEnv)
	}
	if c.timeout <= 0 {
		return nil, c.usageErr("--timeout must be positive, got %v", c.timeout)
	}
	base, err := baseURL(c.addr)
	if err != nil {
		return nil, c.usageErr("%v", err)
	}
	c.http = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	opts := []connect.ClientOption{connect.WithInterceptors(bearer(c.token))}
	c.base = base
	c.inv = shardisv1connect.NewInventoryServiceClient(c.http, base, opts...)
	c.admin = shardisv1connect.NewAdminServiceClient(c.http, base, opts...)
	return rest, nil
}

func (c *client) close() {
	if c.http != nil {
		c.http.CloseIdleConnections()
	}
}

// baseURL turns --addr into the service's base URL.
func baseURL(addr string) (string, error) {
	raw := addr
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("--addr %q: want http://host:port, https://host:port or host:port", addr)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// bearer adds "Authorization: Bearer <token>" to every call when token is set.
func bearer(token string) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if token != "" {
				req.Header().Set("Authorization", "Bearer "+token)
			}
			return next(ctx, req)
		}
	})
}

// call makes one RPC bounded by --timeout; it fails with an *rpcError.
func call[Req, Res any](ctx context.Context, c *client,
	fn func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), req *Req) (*Res, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, err := fn(ctx, connect.NewRequest(req))
	if err != nil {
		msg := err.Error()
		var ce *connect.Error
		if errors.As(err, &ce) {
			msg = ce.Message()
		}
		return nil, &rpcError{code: connect.CodeOf(err), msg: msg}
	}
	return res.Msg, nil
}

// show makes one call and prints its response.
func show[Req, Res any, PRes interface {
	*Res
	proto.Message
}](ctx context.Context, c *client,
	fn func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), req *Req,
	human func(w io.Writer, res PRes)) error {
	res, err := call(ctx, c, fn, req)
	if err != nil {
		return err
	}
	return c.out.emit(PRes(res), func(w io.Writer) { human(w, res) })
}

// stockFlags declares --route and --sku.
func stockFlags(c *client) (route, sku *string) {
	return c.fs.String("route", "", "second-level route `key` (required)"),
		c.fs.String("sku", "", "SKU `id` (required)")
}

func cmdStockLoad(ctx context.Context, c *client, args []string) error {
	route, sku := stockFlags(c)
	qty := c.fs.Int64("qty", 0, "units to add, split over the route's nodes (required; 0 with --limit changes only the limit)")
	limit := c.fs.Int64("limit", -1, "per-user limit: units one user may hold; 0 removes it, -1 (default) keeps the current one")
	if _, err := c.parse(args, 0, 0, "route", "sku", "qty"); err != nil {
		return err
	}
	if *limit < -1 {
		return c.usageErr("--limit %d: want a positive limit, 0 (remove it) or -1 (keep it)", *limit)
	}
	if *qty < 0 {
		return c.usageErr("--qty %d: want units to add, 0 or more (0 with --limit changes only the limit)", *qty)
	}
	req := &v1.LoadStockRequest{RouteKey: *route, SkuId: *sku, Quantity: *qty}
	if *limit >= 0 {
		req.PerUserLimit = limit // absent: the service keeps the SKU's limit
	}
	// a partly applied load is the call's error; an applied one fails after the report when a node was unread
	res, err := call(ctx, c, c.inv.LoadStock, req)
	if err != nil {
		return err
	}
	return emitStock(c.out, res, res.GetStock(), "stock load: the load was applied, but ")
}

func cmdStockGet(ctx context.Context, c *client, args []string) error {
	route, sku := stockFlags(c)
	if _, err := c.parse(args, 0, 0, "route", "sku"); err != nil {
		return err
	}
	res, err := call(ctx, c, c.inv.GetStock, &v1.GetStockRequest{RouteKey: *route, SkuId: *sku})
	if err != nil {
		return err
	}
	return emitStock(c.out, res, res.GetStock(), "stock get: ")
}

func cmdReserve(ctx context.Context, c *client, args []string) error {
	order := c.fs.String("order", "", "order `id` (required)")
	user := c.fs.String("user", "", "user `id`, for per-user limits")
	ttl := c.fs.Duration("ttl", 0, "how long the reservation is held, whole seconds (default: the service's)")
	rest, err := c.parse(args, 1, -1, "order")
	if err != nil {
		return err
	}
	if *ttl < 0 || *ttl%time.Second != 0 || *ttl > time.Duration(1<<31-1)*time.Second {
		return c.usageErr("--ttl %v: want whole seconds from 0s to %v (2^31-1 s)", *ttl, time.Duration(1<<31-1)*time.Second)
	}
	req := &v1.ReserveRequest{OrderId: *order, UserId: *user, TtlSeconds: int32(*ttl / time.Second)}
	for _, arg := range rest {
		it, err := parseItem(arg)
		if err != nil {
			return c.usageErr("%v", err)
		}
		req.Items = append(req.Items, it)
	}
	return show(ctx, c, c.inv.Reserve, req,
		func(w io.Writer, res *v1.ReserveResponse) { writeReservation(w, res) })
}

// parseItem parses ROUTE:SKU:QTY; the SKU may itself contain colons.
func parseItem(s string) (*v1.Item, error) {
	route, tail, ok1 := strings.Cut(s, ":")
	i := strings.LastIndexByte(tail, ':')
	if !ok1 || i < 0 || route == "" || i == 0 {
		return nil, fmt.Errorf("item %q: want ROUTE:SKU:QTY, e.g. clothes:tshirt-1:2", s)
	}
	qty, err := strconv.ParseInt(tail[i+1:], 10, 64)
	if err != nil || qty <= 0 {
		return nil, fmt.Errorf("item %q: quantity %q is not a positive integer", s, tail[i+1:])
	}
	return &v1.Item{RouteKey: route, SkuId: tail[:i], Quantity: qty}, nil
}

func cmdConfirm(ctx context.Context, c *client, args []string) error {
	rest, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	return show(ctx, c, c.inv.Confirm, &v1.ConfirmRequest{OrderId: rest[0]},
		func(w io.Writer, res *v1.ConfirmResponse) {
			writeOutcome(w, res.OrderId, res.Status, res.PendingParts, "")
		})
}

func cmdCancel(ctx context.Context, c *client, args []string) error {
	rest, err := c.parse(args, 1, 1)
	if err != nil {
		return err
	}
	return show(ctx, c, c.inv.Cancel, &v1.CancelRequest{OrderId: rest[0]},
		func(w io.Writer, res *v1.CancelResponse) {
			writeOutcome(w, res.OrderId, res.Status, res.PendingParts, res.Reason)
		})
}

// setRouteEnabled enables or drains route rest[2] of server rest[1] on
// node rest[0] and prints the node's routes.
func setRouteEnabled(ctx context.Context, c *client, rest []string, enabled bool) error {
	return show(ctx, c, c.admin.SetRouteEnabled, &v1.SetRouteEnabledRequest{
		Node: rest[0], Server: rest[1], Route: rest[2], Enabled: enabled},
		func(w io.Writer, res *v1.SetRouteEnabledResponse) {
			writeNodeRoutes(w, res.Node, rest[1], rest[2], enabled)
		})
}
