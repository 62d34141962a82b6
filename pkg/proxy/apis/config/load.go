package config

import (
	"bytes"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/kube-proxy/config/v1alpha1"
)

var (
	scheme = runtime.NewScheme()
	// strictCodecs rejects unknown and duplicated fields. Upstream falls back to a
	// lenient decoder with a log line; we refuse instead, because a misspelt
	// field silently becoming its default is how clusters end up half-configured.
	strictCodecs = serializer.NewCodecFactory(scheme, serializer.EnableStrict)
)

func init() {
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
}

var kubeProxyConfigurationGVK = v1alpha1.SchemeGroupVersion.WithKind("KubeProxyConfiguration")

// LoadFile reads, strictly decodes and defaults the KubeProxyConfiguration of a
// --config file (LoadFileAll; a KubeProxyIPVSConfiguration beside it is checked and
// left out). Every error names the file.
func LoadFile(path string) (*v1alpha1.KubeProxyConfiguration, error) {
	cfg, _, err := LoadFileAll(path)
	return cfg, err
}

// Decode strictly decodes a YAML or JSON KubeProxyConfiguration and applies the
// defaults. apiVersion and kind are required, as upstream requires them.
func Decode(data []byte) (*v1alpha1.KubeProxyConfiguration, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("empty configuration: apiVersion %s and kind KubeProxyConfiguration are required", v1alpha1.SchemeGroupVersion)
	}
	obj, gvk, err := strictCodecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("decoding KubeProxyConfiguration: %w", err)
	}
	cfg, ok := obj.(*v1alpha1.KubeProxyConfiguration)
	if !ok || gvk == nil || *gvk != kubeProxyConfigurationGVK {
		return nil, fmt.Errorf("decoding KubeProxyConfiguration: got %v, want %v", gvk, kubeProxyConfigurationGVK)
	}
	SetDefaults(cfg)
	return cfg, nil
}

// Encode serialises cfg as YAML with apiVersion and kind, in the form Decode
// reads back.
func Encode(cfg *v1alpha1.KubeProxyConfiguration) ([]byte, error) {
	info, ok := runtime.SerializerInfoForMediaType(strictCodecs.SupportedMediaTypes(), runtime.ContentTypeYAML)
	if !ok {
		return nil, fmt.Errorf("no YAML serializer registered")
	}
	encoder := strictCodecs.EncoderForVersion(info.Serializer, schema.GroupVersions{v1alpha1.SchemeGroupVersion})
	var buf bytes.Buffer
	if err := encoder.Encode(cfg.DeepCopy(), &buf); err != nil {
		return nil, fmt.Errorf("encoding KubeProxyConfiguration: %w", err)
	}
	return buf.Bytes(), nil
}

// WriteFile writes cfg, and extras unless it is nil, as YAML to path (EncodeAll).
func WriteFile(path string, cfg *v1alpha1.KubeProxyConfiguration, extras *Extras) error {
	data, err := EncodeAll(cfg, extras)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("writing config file: %w", err)
	}
	return nil
}
