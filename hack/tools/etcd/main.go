// Command etcd runs the etcd server from its published Go module.
//
// Why: the local control plane needs etcd >= 3.5.13 (older releases break consistent watch
// reads of current API servers) and no binary downloads are possible, so etcd is compiled from
// go.etcd.io/etcd/server/v3 pinned in this module's go.mod.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
