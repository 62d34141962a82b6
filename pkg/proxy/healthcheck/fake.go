package healthcheck

import (
	"maps"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// FakeServiceHealthServer is a ServiceHealthServer for proxier tests: it opens no
// port and remembers what it was last told.
type FakeServiceHealthServer struct {
	mu                 sync.Mutex
	services           map[types.NamespacedName]uint16
	endpoints          map[types.NamespacedName]int
	syncServicesCalls  int
	syncEndpointsCalls int
	err                error
}

var _ ServiceHealthServer = &FakeServiceHealthServer{}

// NewFakeServiceHealthServer returns an empty fake.
func NewFakeServiceHealthServer() *FakeServiceHealthServer {
	return &FakeServiceHealthServer{}
}

// SetError makes every following call return err (nil to stop).
func (f *FakeServiceHealthServer) SetError(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// SyncServices records a copy of newServices.
func (f *FakeServiceHealthServer) SyncServices(newServices map[types.NamespacedName]uint16) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.syncServicesCalls++
	f.services = maps.Clone(newServices)
	return f.err
}

// SyncEndpoints records a copy of newEndpoints.
func (f *FakeServiceHealthServer) SyncEndpoints(newEndpoints map[types.NamespacedName]int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.syncEndpointsCalls++
	f.endpoints = maps.Clone(newEndpoints)
	return f.err
}

// Services returns a copy of the map the last SyncServices got (nil before any).
func (f *FakeServiceHealthServer) Services() map[types.NamespacedName]uint16 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.services)
}

// Endpoints returns a copy of the map the last SyncEndpoints got (nil before any).
func (f *FakeServiceHealthServer) Endpoints() map[types.NamespacedName]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.endpoints)
}

// Calls returns how many times SyncServices and SyncEndpoints were called.
func (f *FakeServiceHealthServer) Calls() (syncServices, syncEndpoints int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.syncServicesCalls, f.syncEndpointsCalls
}
