// Package templates holds the project's own copy of the platform's GitOps
// layout (tier templates, tenant and pooled-env kustomizations), byte for byte
// as the reference repository has it. `make run` seeds its local git server
// from it, and tests use it as the starting tree.
package templates

import "embed"

// FS holds application-plane/production/... as in the reference repository.
//
//go:embed all:application-plane
var FS embed.FS

// Root is the GITOPS_ROOT of the embedded tree.
const Root = "application-plane/production"
