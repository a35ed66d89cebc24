// CoreDNS for the real nodes of the local cluster, with only the plugins its
// Corefile and a debugging user need: CoreDNS's documented way to choose plugins at
// compile time (its own main with a directives list). The stock build compiles
// every plugin (the AWS, Azure and Google Cloud DNS SDKs, etcd, tracing), about
// four times the Go code and the CPU of this one, on a CI run's critical path.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// The plugins' order in a server block is this list's, as in CoreDNS's plugin.cfg.
var directives = []string{
	"reload",
	"bind",
	"ready",
	"health",
	"errors",
	"log",
	"loadbalance",
	"cache",
	"kubernetes",
	"loop",
	"forward",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
