package config_test

import (
	"fmt"

	"github.com/shardis/shardis/config"
)

func ExampleParse() {
	yml := []byte(`
nodes:
  n1: {addr: 127.0.0.1:7001}
  n2: {addr: 127.0.0.1:7002, weight: 2}
servers:
  inventory:
    routes:
      clothes: [n1, n2]
`)
	env := []string{"SHARDIS_HEALTH__HEARTBEAT=250ms"}
	cfg, err := config.Parse(yml, env)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Nodes["n1"].Weight, cfg.Nodes["n2"].Weight)
	fmt.Println(cfg.Servers["inventory"].OnNodeDown, cfg.Servers["inventory"].Routes["clothes"])
	fmt.Println(cfg.Health.Heartbeat, cfg.Health.Backoff)
	// Output:
	// 1 2
	// fail [n1 n2]
	// 250ms [500ms 1s 1.5s]
}

func ExampleParse_problems() {
	yml := []byte(`
nodes:
  n1: {addr: 127.0.0.1:7001}
servers:
  inventory:
    routes:
      clothes: [n1]
health:
  heartbeet: 1s
`)
	_, err := config.Parse(yml, nil)
	fmt.Println(err)
	if ps, ok := config.IsProblems(err); ok {
		fmt.Println(ps[0].Path)
	}
	// Output:
	// invalid configuration (1 problem):
	//   health.heartbeet: unknown key (known: backoff, heartbeat, hold_back, timeout)
	// health.heartbeet
}
