// Command tenant-worker replaces Argo Events and Argo Workflows in the EKS
// SaaS GitOps platform: it turns tenant messages on SQS into commits in the
// GitOps repository that Flux applies.
package main

import (
	"os"

	"github.com/tenant-worker/tenant-worker/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr, os.Getenv)) }
