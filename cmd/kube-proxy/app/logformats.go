package app

// Upstream kube-proxy offers --logging-format=json and the --log-json-* flags.
import _ "k8s.io/component-base/logs/json/register"
