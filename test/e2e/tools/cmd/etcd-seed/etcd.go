package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// job is one input line with the ClusterIP allocated to it.
type job struct {
	it item
	ip netip.Addr
}

func run(ctx context.Context, o options) error {
	start := time.Now()
	st, err := newStorage()
	if err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(o.etcd, ","), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("connecting to etcd %s: %w", o.etcd, err)
	}
	defer cli.Close()
	nsNote, err := ensureNamespace(ctx, cli, st, o)
	if err != nil {
		return err
	}
	alloc := &allocator{} // the objects phase allocates nothing
	if o.phase != phaseObjects {
		if alloc, err = newAllocator(ctx, cli, o); err != nil {
			return err
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan []job, o.workers)
	var first error
	var once sync.Once
	var keys atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < o.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				if ctx.Err() != nil {
					continue // drain after an error
				}
				n, err := commit(ctx, cli, st, o, b)
				keys.Add(int64(n))
				if err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
	n, slices, ferr := feed(ctx, os.Stdin, os.Stdout, alloc, o, batches)
	close(batches)
	wg.Wait()
	if first != nil {
		return first
	}
	if ferr != nil {
		return ferr
	}
	services, ips := n, n
	switch o.phase {
	case phaseIPAddresses:
		services = 0
	case phaseObjects:
		ips = 0
	}
	fmt.Fprintf(os.Stderr, "etcd-seed: phase %s: %d Services, %d EndpointSlices and %d IPAddresses written to %s in %s (%d keys, one per transaction; %d addresses of the range were taken before); namespace %s %s\n",
		o.phase, services, slices, ips, o.etcd, time.Since(start).Round(time.Millisecond), keys.Load(), alloc.preTaken, o.namespace, nsNote)
	return nil
}

// feed reads the input lines, allocates their addresses in order, prints
// "NAME CLUSTERIP" for each and hands them to the writers in batches.
func feed(ctx context.Context, in io.Reader, out io.Writer, alloc *allocator, o options, batches chan<- []job) (n, slices int, err error) {
	dec := json.NewDecoder(bufio.NewReaderSize(in, 1<<20))
	w := bufio.NewWriterSize(out, 1<<16)
	defer func() {
		if ferr := w.Flush(); err == nil && ferr != nil {
			err = ferr
		}
	}()
	var batch []job
	send := func() error {
		if len(batch) == 0 {
			return nil
		}
		select {
		case batches <- batch:
			batch = nil
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for {
		var it item
		if err := dec.Decode(&it); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return n, slices, fmt.Errorf("input object %d: %w", n+1, err)
		}
		ip, err := it.validate(o)
		if err != nil {
			return n, slices, fmt.Errorf("input object %d: %w", n+1, err)
		}
		if o.phase != phaseObjects {
			if ip, err = alloc.take(); err != nil {
				return n, slices, fmt.Errorf("service %s: %w", it.Service.Name, err)
			}
		}
		fmt.Fprintf(w, "%s %s\n", it.Service.Name, ip)
		batch = append(batch, job{it: it, ip: ip})
		n++
		if it.Slice != nil && o.phase != phaseIPAddresses {
			slices++
		}
		if len(batch) == o.batch {
			if err := send(); err != nil {
				return n, slices, err
			}
		}
	}
	return n, slices, send()
}

// commit writes the jobs' objects, one key per transaction: the
// apiserver's watch cache and its clients resume a broken watch after the
// revision of the last event they saw, so the events of a revision that held
// several keys, cut in the middle (the cache closes a watcher that falls
// behind, as its own informers do during a bulk write), would be lost to
// them for good. Each put is conditional on its key being absent and, in the
// objects phase, on the Service's IPAddress being there. It returns the
// number of keys written.
func commit(ctx context.Context, cli *clientv3.Client, st *storage, o options, jobs []job) (int, error) {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	n := 0
	for _, j := range jobs {
		s, err := st.prepare(o, j.it, j.ip, now)
		if err != nil {
			return n, err
		}
		for i, k := range s.keys {
			cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)}
			if s.mustExist != "" {
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.mustExist), ">", 0))
			}
			resp, err := cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(k, string(s.vals[i]))).Commit()
			if err != nil {
				return n, fmt.Errorf("writing %s: %w", k, err)
			}
			if !resp.Succeeded {
				if s.mustExist != "" {
					return n, fmt.Errorf("not writing %s: it exists already, or the IPAddress %s does not", k, s.mustExist)
				}
				return n, fmt.Errorf("not writing %s: it exists already", k)
			}
			n++
		}
	}
	return n, nil
}

// ensureNamespace writes the namespace unless it exists.
func ensureNamespace(ctx context.Context, cli *clientv3.Client, st *storage, o options) (string, error) {
	key := namespaceKey(o.prefix, o.namespace)
	val, err := st.namespaceObject(o.namespace, metav1.NewTime(time.Now().Truncate(time.Second)))
	if err != nil {
		return "", err
	}
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(clientv3.OpPut(key, string(val))).Commit()
	if err != nil {
		return "", fmt.Errorf("writing namespace %s: %w", o.namespace, err)
	}
	if resp.Succeeded {
		return "created", nil
	}
	return "existed", nil
}

// allocator hands out the range's addresses in order, from its second one
// (the first is the `kubernetes` Service's) to the one before the broadcast
// address, skipping those with an IPAddress object.
type allocator struct {
	next, last netip.Addr
	used       map[netip.Addr]bool
	preTaken   int
}

func newAllocator(ctx context.Context, cli *clientv3.Client, o options) (*allocator, error) {
	prefix := ipKey(o.prefix, "")
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("listing the IPAddresses: %w", err)
	}
	a := &allocator{used: map[netip.Addr]bool{}}
	for _, kv := range resp.Kvs {
		if ip, err := netip.ParseAddr(strings.TrimPrefix(string(kv.Key), prefix)); err == nil && o.cidr.Contains(ip) {
			a.used[ip] = true
		}
	}
	a.preTaken = len(a.used)
	b := o.cidr.Addr().As4()
	bcast := binary.BigEndian.Uint32(b[:]) | (uint32(1)<<(32-o.cidr.Bits()) - 1)
	binary.BigEndian.PutUint32(b[:], bcast)
	a.last = netip.AddrFrom4(b).Prev()
	a.next = o.cidr.Addr().Next().Next()
	return a, nil
}

func (a *allocator) take() (netip.Addr, error) {
	for a.next.Compare(a.last) <= 0 {
		ip := a.next
		a.next = a.next.Next()
		if !a.used[ip] {
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no free address left in the Service range")
}
