// Command etcd is the upstream etcd server, built at the version Kubernetes
// pins, for the end-to-end tests' throwaway control plane.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
