// Command etcd-seed writes ClusterIP Services, their EndpointSlices and the
// IPAddress objects of their ClusterIPs straight into a test control plane's
// etcd, as kube-apiserver v1.37 would have stored them, so that a scale test
// can put 100,000 Services in place in seconds: kube-apiserver's IPAddress
// allocator lists every IPAddress on each allocation, which makes creating N
// Services through the API cost O(N^2). The apiserver may run meanwhile: its
// watch cache and informers are fed by etcd's watch, so the keys appear to it
// as if created through it.
//
// Usage:
//
//	etcd-seed -etcd http://127.0.0.1:2379 -namespace NS -service-cidr 10.96.0.0/16 < objects.jsonl
//
// Input (stdin), one JSON object a line: {"service": <v1.Service>, "slice":
// <discovery.k8s.io/v1 EndpointSlice, optional>}, each as a client would send
// it to Create: no ClusterIP, uid or creationTimestamp. The tool does what the
// apiserver's create path does to them: v1 defaulting, a uid, a
// creationTimestamp, the slice's generation 1, and for the Service a free
// ClusterIP from -service-cidr (never the range's first address, which the
// `kubernetes` Service takes, nor one with an IPAddress already), SingleStack
// IPv4, and an IPAddress object pointing at it as the allocator writes one.
// The namespace is written too if it is missing. Every object is encoded as
// the apiserver stores it (protobuf, "k8s\x00" + runtime.Unknown, in its
// storage version) under the default /registry prefix, one key per etcd
// transaction (see commit: the apiserver's watches need one object per
// revision), each only if the key does not exist (the tool fails otherwise);
// a Service's IPAddress first, then the Service, then its slice.
//
// -phase splits the writing in two for an apiserver that is running:
// "ipaddresses" writes only the IPAddresses (allocating as above), "objects"
// only the Services and slices, each with the spec.clusterIP the first phase
// gave it (the IPAddress must exist). The caller waits in between until the
// apiserver lists the IPAddresses: its ClusterIP repair loop, fed by separate
// informers, reports a Service whose IPAddress it has not seen yet as not
// allocated (a Warning Event and a failed re-create each). The other way round
// it waits: an IPAddress without its Service is deleted only after 60 s.
//
// Output (stdout): "NAME CLUSTERIP" per Service, in input order; a summary on
// stderr. Exit status 1 on any error (objects already committed stay).
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"
)

type options struct {
	etcd      string
	prefix    string
	namespace string
	cidr      netip.Prefix
	batch     int // Services per writer job
	workers   int // writers, each with one transaction in flight
	phase     string
}

// The phases: what each writes.
const (
	phaseAll         = "all"         // IPAddress, Service and slice in one transaction
	phaseIPAddresses = "ipaddresses" // allocate and write the IPAddresses only
	phaseObjects     = "objects"     // the Services (clusterIP given) and slices only
)

func parseFlags() (options, error) {
	var o options
	var cidr string
	flag.StringVar(&o.etcd, "etcd", "", "etcd client URL(s), comma-separated (required)")
	flag.StringVar(&o.prefix, "prefix", "/registry", "the apiserver's --etcd-prefix")
	flag.StringVar(&o.namespace, "namespace", "", "the namespace of every object (required; written if missing)")
	flag.StringVar(&cidr, "service-cidr", "", "the apiserver's IPv4 Service range, e.g. 10.96.0.0/16 (required)")
	flag.IntVar(&o.batch, "batch", 50, "Services handed to a writer at a time")
	flag.IntVar(&o.workers, "workers", 16, "writers (each has one etcd transaction in flight)")
	flag.StringVar(&o.phase, "phase", phaseAll, "what to write: all, ipaddresses (allocating), or objects (Services with the clusterIP the ipaddresses phase gave, and slices)")
	flag.Parse()
	if o.etcd == "" || o.namespace == "" || cidr == "" || flag.NArg() != 0 {
		return o, fmt.Errorf("usage: etcd-seed -etcd URL -namespace NS -service-cidr CIDR < objects.jsonl")
	}
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() || p.Bits() > 30 {
		return o, fmt.Errorf("-service-cidr %q: want an IPv4 CIDR of at least 4 addresses", cidr)
	}
	o.cidr = p.Masked()
	if o.batch < 1 || o.workers < 1 {
		return o, fmt.Errorf("-batch and -workers must be at least 1")
	}
	if o.phase != phaseAll && o.phase != phaseIPAddresses && o.phase != phaseObjects {
		return o, fmt.Errorf("-phase %q: want all, ipaddresses or objects", o.phase)
	}
	o.prefix = strings.TrimSuffix(o.prefix, "/")
	return o, nil
}

func main() {
	o, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd-seed:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "etcd-seed:", err)
		os.Exit(1)
	}
}
