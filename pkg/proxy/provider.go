package proxy

// Provider is a proxier as ProxyServer drives it: it receives informer events and
// runs its own sync loop (the only writer of kernel state).
type Provider interface {
	ServiceHandler
	EndpointSliceHandler
	NodeHandler
	// Sync requests a sync as soon as the runner allows.
	Sync()
	// SyncLoop runs the sync loop until the stop channel given at construction closes.
	SyncLoop()
}
