// Package deploy holds the Kubernetes manifests for running kube-proxy-ipvs:
// standalone/ (its own ServiceAccount, RBAC, ConfigMap and DaemonSet, plain
// YAML and a kustomization) and kubeadm/ (changes only the image of kubeadm's
// kube-system/kube-proxy DaemonSet). Its tests decode them strictly into the
// API types, build the kustomizations with kustomize, and load every
// configuration with the daemon's own loader.
package deploy
