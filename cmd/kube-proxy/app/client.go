package app

import (
	"context"
	"fmt"

	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	"k8s.io/kube-proxy/config/v1alpha1"
)

// createClient builds the apiserver client from --kubeconfig / --master, or the
// in-cluster config when neither is given, with the configured QPS, burst and
// content types.
func createClient(ctx context.Context, cfg *v1alpha1.KubeProxyConfiguration, master string) (clientset.Interface, error) {
	cc := cfg.ClientConnection
	var restConfig *rest.Config
	var err error
	if cc.Kubeconfig == "" && master == "" {
		klog.FromContext(ctx).Info("Neither kubeconfig file nor master URL was specified, falling back to in-cluster config")
		restConfig, err = rest.InClusterConfig()
	} else {
		restConfig, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: cc.Kubeconfig},
			&clientcmd.ConfigOverrides{ClusterInfo: clientcmdapi.Cluster{Server: master}},
		).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("building the apiserver client configuration: %w", err)
	}
	restConfig.AcceptContentTypes = cc.AcceptContentTypes
	restConfig.ContentType = cc.ContentType
	restConfig.QPS = cc.QPS
	restConfig.Burst = int(cc.Burst)
	restConfig.UserAgent = rest.DefaultKubernetesUserAgent()

	client, err := clientset.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("creating the apiserver client: %w", err)
	}
	return client, nil
}
