package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/inventory"
	"github.com/tenant-worker/tenant-worker/internal/progress"
)

func tenantsCmd(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := newFlags("tenants", tenantsUsage, stdout, stderr)
	opts := config.Default()
	opts.BindGroups(fs, getenv, config.Git)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	tier := fs.String("tier", "", "only this tier")
	code, done := parse(fs, args)
	if done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tenant-worker tenants: unexpected arguments %v\n", fs.Args())
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	line := progress.New(stderr)
	repo, code := openRepo(ctx, "tenants", opts, line, stderr)
	if repo == nil {
		return code
	}
	snap, err := repo.Snapshot(repo.Head())
	if err != nil {
		fmt.Fprintf(stderr, "tenant-worker tenants: %v\n", err)
		return 1
	}
	inv, err := inventory.Read(snap, gitops.Layout{Root: opts.GitopsRoot}, func(t string, n int) {
		line.Show("reading %d tenants of tier %s", n, t)
	})
	line.Clear()
	if err != nil {
		fmt.Fprintf(stderr, "tenant-worker tenants: %v\n", err)
		return 1
	}
	if *tier != "" {
		kept := inv.Tenants[:0]
		for _, t := range inv.Tenants {
			if t.Tier == *tier || (t.Pool && *tier == "pool") {
				kept = append(kept, t)
			}
		}
		inv.Tenants = kept
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(inv); err != nil {
			return 1
		}
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tTENANT\tCHART VERSION\tIMAGES\tSTATE")
	for _, t := range inv.Tenants {
		tierName := t.Tier
		if t.Pool {
			tierName = "(pool env)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", tierName, t.ID, orDash(t.ChartVersion), images(t.Images), state(t))
	}
	if err := tw.Flush(); err != nil {
		return 1
	}
	fmt.Fprintf(stdout, "\ntiers: %s; %d entries\n", strings.Join(inv.Tiers, ", "), len(inv.Tenants))
	return 0
}

func images(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for policy, tag := range m {
		parts = append(parts, strings.TrimSuffix(policy, "-image-policy")+"="+tag)
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func state(t inventory.Tenant) string {
	switch {
	case t.File && t.Listed:
		return "ok"
	case t.File:
		return "file not listed in kustomization"
	default:
		return "listed, file missing"
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

const tenantsUsage = `Usage: tenant-worker tenants [flags]

List the tiers and tenants of the GitOps repository's branch, with the chart
version each HelmRelease asks for and the image tags on its $imagepolicy
lines. STATE is ok, or says which of the tenant file and the kustomization
entry is missing.

Flags:
`
