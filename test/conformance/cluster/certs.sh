#!/usr/bin/env bash
# Writes the conformance cluster's PKI and kubeconfigs into DIR (fresh for
# every cluster): one CA (also the kubelets' client CA and the controller
# manager's CSR signer), the apiserver's serving certificate, the service
# account key pair, and a client certificate + kubeconfig for the admin
# (system:masters), the controller manager, the scheduler, the apiserver's
# kubelet client and each node's kubelet (system:node:NAME in system:nodes,
# as the Node authorizer wants). ECDSA P-256 keys: fast to make under load.
#
# Usage: certs.sh DIR APISERVER_URL APISERVER_SANS NODE...
#   APISERVER_SANS: comma-separated "IP:a.b.c.d" / "DNS:name" entries
set -euo pipefail
dir=$1 url=$2 sans=$3
shift 3
mkdir -p "$dir"
cd "$dir"

key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null; }
# cert NAME SUBJECT EXTENSIONS: signed by the CA, valid a year.
cert() {
	local name=$1 subj=$2 ext=$3
	key "$name"
	openssl req -new -key "$name.key" -subj "$subj" -out "$name.csr" 2>/dev/null
	printf '%s\n' "$ext" >"$name.ext"
	openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
		-extfile "$name.ext" -out "$name.crt" 2>/dev/null
	rm -f "$name.csr" "$name.ext"
}
b64() { base64 -w0 <"$1"; }
kubeconfig() { # NAME USER CERTNAME
	cat >"$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kpi-conformance
  cluster:
    server: $url
    certificate-authority-data: $(b64 ca.crt)
users:
- name: $2
  user:
    client-certificate-data: $(b64 "$3.crt")
    client-key-data: $(b64 "$3.key")
contexts:
- name: $2@kpi-conformance
  context:
    cluster: kpi-conformance
    user: $2
current-context: $2@kpi-conformance
EOF
}

key ca
openssl req -x509 -new -key ca.key -subj "/CN=kpi-conformance-ca" -days 365 -out ca.crt \
	-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
client="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
cert apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=$sans"
key sa
openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
cert admin "/O=system:masters/CN=kubernetes-admin" "$client"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
cert controller-manager "/CN=system:kube-controller-manager" "$client"
cert scheduler "/CN=system:kube-scheduler" "$client"
kubeconfig admin kubernetes-admin admin
kubeconfig controller-manager system:kube-controller-manager controller-manager
kubeconfig scheduler system:kube-scheduler scheduler
for n in "$@"; do
	cert "kubelet-$n" "/O=system:nodes/CN=system:node:$n" "$client"
	kubeconfig "kubelet-$n" "system:node:$n" "kubelet-$n"
done
rm -f ca.srl
