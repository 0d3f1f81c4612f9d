#!/usr/bin/env bash
# Builds the control plane the readiness tests run, from Go modules, into
# $1 (a folder under .tools): etcd, kube-apiserver, kube-controller-manager
# and Flux's source-, kustomize- and helm-controller, with the CRDs of each
# controller. About 8.5 minutes cold on 2 cores; seconds with a warm Go
# build cache. See ../../../../shared/TESTING.md ("A control plane without
# Docker") for why each step is there.
set -euo pipefail

out=$1
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
SOURCE_VERSION=${SOURCE_VERSION:-v1.9.6}
KUSTOMIZE_VERSION=${KUSTOMIZE_VERSION:-v1.9.6}
HELM_VERSION=${HELM_VERSION:-v1.6.4}
GO=${GO:-go}

src=$out.src
# Without the symbol table and DWARF, each binary links in about half the
# time (Gitea: 15 -> 9 s with a warm build cache); stack traces still name
# every function.
strip="-s -w"
rm -rf "$src" && mkdir -p "$src" "$out.tmp/bin" "$out.tmp/crds"
modcache=$($GO env GOMODCACHE)
export GOFLAGS=-mod=mod GOTOOLCHAIN=local

# etcd: a three-line main over etcdmain.
mkdir -p "$src/etcd"
cat >"$src/etcd/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
(cd "$src/etcd" && $GO mod init controlplane/etcd >/dev/null 2>&1 &&
	$GO get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1 &&
	$GO build -ldflags "$strip" -o "$out.tmp/bin/etcd" .)
echo "built etcd $ETCD_VERSION"

# kube-apiserver and kube-controller-manager: k8s.io/kubernetes replaces its
# staging modules with local folders that are not in its module zip, so a
# main module of our own replaces each with the served module of the same
# release.
mkdir -p "$src/kube"
$GO mod download "k8s.io/kubernetes@$KUBE_VERSION"
minor=${KUBE_VERSION#v1.}
staging=v0.$minor
{
	echo "module controlplane/kube"
	echo
	echo "go 1.26"
	echo
	echo "require k8s.io/kubernetes $KUBE_VERSION"
	echo
	grep -oE '^\s*k8s.io/[a-z0-9./-]+ => \./staging' "$modcache/k8s.io/kubernetes@$KUBE_VERSION/go.mod" |
		awk -v v="$staging" '{ print "replace " $1 " => " $1 " " v }'
} >"$src/kube/go.mod"
cat >"$src/kube/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
GO
major=${KUBE_VERSION#v}; major=${major%%.*}
kminor=${KUBE_VERSION#v*.}; kminor=${kminor%%.*}
ld=$strip
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ld="$ld -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$kminor"
done
(cd "$src/kube" &&
	$GO build -ldflags "$ld" -o "$out.tmp/bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver &&
	$GO build -ldflags "$ld" -o "$out.tmp/bin/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager)
echo "built kube-apiserver and kube-controller-manager $KUBE_VERSION"

# Flux controllers: a writable copy of each module, its nested api module
# taken from the proxy instead of the folder the zip lacks.
flux() {
	local name=$1 version=$2
	shift 2
	$GO mod download "github.com/fluxcd/$name@$version"
	cp -r "$modcache/github.com/fluxcd/$name@$version" "$src/$name"
	chmod -R u+w "$src/$name"
	(cd "$src/$name" &&
		$GO mod edit -dropreplace "github.com/fluxcd/$name/api" "$@" &&
		$GO build -ldflags "$strip" -o "$out.tmp/bin/$name" .)
	cp "$src/$name"/config/crd/bases/*.yaml "$out.tmp/crds/"
	echo "built $name $version"
}
flux source-controller "$SOURCE_VERSION" -replace github.com/fluxcd/pkg/artifact=github.com/fluxcd/pkg/artifact@v0.18.0
flux kustomize-controller "$KUSTOMIZE_VERSION"
flux helm-controller "$HELM_VERSION"

rm -rf "$out" "$src"
mv "$out.tmp" "$out"
