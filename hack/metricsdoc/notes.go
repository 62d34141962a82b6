package metricsdoc

// operatorNotes is the "What it tells you" column of the metrics reference: one line
// per kube-proxy family on what an operator reads from it. Every family of a noted
// section needs one, and a note for a family the daemon does not serve fails the doc
// test.
var operatorNotes = map[string]string{
	// Upstream names.
	"kubeproxy_sync_proxy_rules_duration_seconds": "Every sync of one family's proxier, full or partial, failed ones included. " +
		"A p99 of seconds means changes wait that long; the full and partial histograms say which kind is slow.",
	"kubeproxy_sync_full_proxy_rules_duration_seconds": "Full syncs: the first after start, the one after a failed sync, and each periodic resync " +
		"(its kernel read excluded: `kubeproxy_ipvs_resync_read_duration_seconds`). Grows with the number of Services.",
	"kubeproxy_sync_partial_proxy_rules_duration_seconds": "Syncs of the queued changes only: milliseconds. " +
		"One of 500 ms or more is logged at `-v=2` as `Slow partial sync` with where its time went.",
	"kubeproxy_sync_proxy_rules_last_timestamp_seconds": "When the family last synced successfully. A periodic sync runs every `syncPeriod` (30 s), " +
		"so `time() - value` well past it means syncs fail or have stopped.",
	"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds": "When a change was last queued for the family (also set at start). " +
		"Later than the last successful sync for more than 2 x `syncPeriod`: `/healthz` and `/livez` answer 503.",
	"kubeproxy_network_programming_duration_seconds": "From a Pod or Service change (the EndpointSlice's `endpoints.kubernetes.io/last-change-trigger-time`) " +
		"to the sync that programmed it here: the network programming latency SLI. Includes clock skew with the control plane.",
	"kubeproxy_sync_proxy_rules_endpoint_changes_pending": "EndpointSlice changes received and not yet taken by a sync (both families); " +
		"back to 0 at each sync. Staying up means syncs are not running.",
	"kubeproxy_sync_proxy_rules_endpoint_changes_total":  "EndpointSlice changes received: the churn that drives partial syncs.",
	"kubeproxy_sync_proxy_rules_service_changes_pending": "Service changes received and not yet taken by a sync (both families); back to 0 at each sync.",
	"kubeproxy_sync_proxy_rules_service_changes_total":   "Service changes received.",
	"kubeproxy_sync_proxy_rules_no_local_endpoints_total": "Services with a Local traffic policy whose endpoints are all on other nodes, by policy " +
		"(`internal`: the ClusterIP; `external`: node ports, external and LoadBalancer IPs). Normal where none of their pods run: " +
		"this node's pods fall back to the other endpoints (upstream's ipvs mode), outside clients get no answer here. " +
		"A gauge despite its name, as upstream.",
	"kubeproxy_sync_proxy_rules_iptables_restore_failures_total": "`iptables-restore` runs the kernel refused (iptables backend), " +
		"including the several runs that isolate a refused Service rule, which is then held back (`iptables_error`).",
	"kubeproxy_proxy_healthz_total": "`/healthz` answers by HTTP code. 503: a family has had a change pending for 2 x `syncPeriod`, " +
		"or the Node is being deleted or carries the `ToBeDeletedByClusterAutoscaler` taint (load balancers drain it).",
	"kubeproxy_proxy_livez_total": "`/livez` answers by HTTP code. 503: a family has had a change pending for 2 x `syncPeriod` " +
		"(the proxier is stuck; the liveness probe restarts the pod).",
	"kubeproxy_conntrack_reconciler_sync_duration_seconds": "Each cleanup of conntrack flows left to removed UDP or SCTP endpoints.",
	"kubeproxy_conntrack_reconciler_deleted_entries_total": "Conntrack flows those cleanups deleted. Flat while UDP endpoints go away " +
		"and `Failed to delete stale conntrack flows` in the log: clients may keep sending to dead pods.",

	// Ours.
	"kubeproxy_ipvs_kernel_operations_total": "Requests sent to the kernel: one per IPVS or address netlink request, per ipset member batch " +
		"(netlink, or `ipset restore`), per iptables-restore/-save run, per nftables transaction or listing; `operation` names it. " +
		"Between periodic resyncs an idle node adds nothing.",
	"kubeproxy_ipvs_syncs_total": "Syncs by type, both families counted together (a dual-stack node counts two per round). " +
		"More full syncs than one per `syncPeriod` and family: failed syncs, each followed by a full one.",
	"kubeproxy_ipvs_sync_failures_total": "Syncs that returned an error (a failure no single object explains, e.g. a kernel read or our base rules refused); " +
		"each forces a full sync, retried with backoff. Refused objects are held back instead and not counted here.",
	"kubeproxy_ipvs_drift_repairs_total": "Writes a periodic resync made to undo changes someone else made to our state " +
		"(`ipvs`: virtual and real servers, `ipset`: set members, `netlink`: kube-ipvs0 addresses, `nftables`: set elements); " +
		"logged as `Periodic resync repaired drift`. Steady growth: another agent fights over the same objects.",
	"kubeproxy_ipvs_graceful_termination_pending": "Real servers draining at weight 0 (terminating endpoints, bounded by the pod's grace period). " +
		"Stays high only while pods terminate.",
	"kubeproxy_ipvs_held_back_objects": "Objects not programmed right now, by reason: `invalid_value` (refused before the kernel, " +
		"with a `KubeProxyValueNotProgrammed` Event) or `ipvs_error`, `ipset_error`, `address_error`, `iptables_error`, `nftables_error` " +
		"(the kernel refused them; retried with backoff). Syncs go on. Which ones: the held-back list.",
	"kubeproxy_ipvs_resync_read_duration_seconds": "How long a periodic resync's read of the kernel took, made beside the sync loop " +
		"so changes do not wait for it. Seconds at 10,000 Services.",

	// Per-virtual-server counters.
	"kubeproxy_ipvs_virtual_server_connections_total":      "Connections IPVS scheduled to the Service port's virtual server (the kernel's counter; `ipvsadm -Ln --stats`).",
	"kubeproxy_ipvs_virtual_server_incoming_packets_total": "Packets from clients through the virtual server.",
	"kubeproxy_ipvs_virtual_server_outgoing_packets_total": "Packets back to clients through the virtual server (NAT mode: the replies).",
	"kubeproxy_ipvs_virtual_server_incoming_bytes_total":   "Bytes from clients through the virtual server.",
	"kubeproxy_ipvs_virtual_server_outgoing_bytes_total":   "Bytes back to clients through the virtual server.",
}
