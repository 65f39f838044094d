// Command etcd is the etcd server, built from go.etcd.io/etcd/server/v3 at the version this
// module pins (upstream's own etcd main package lives in a module that is not published).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
