// Package deploy holds the Kubernetes manifests for running kube-proxy-ipvs
// (daemonset.yaml); its test checks them against the real API types and the
// daemon's own configuration loader.
package deploy
