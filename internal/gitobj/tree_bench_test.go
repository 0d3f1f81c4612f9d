package gitobj

import (
	"fmt"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"
)

// BenchmarkCommitLargeFolder: one commit adding a file to a folder of
// 10,000 files and editing the folder's 200 KB list, as an onboarding does
// at 10,000 tenants.
func BenchmarkCommitLargeFolder(b *testing.B) {
	s := memory.NewStorage()
	trees := NewTreeCache(16)
	files := map[string][]byte{}
	list := []byte("resources:\n")
	for i := range 10000 {
		files[fmt.Sprintf("tenants/premium/seed-%d.yaml", i)] = fmt.Appendf(nil, "tenant %d\n", i)
		list = fmt.Appendf(list, "  - seed-%d.yaml\n", i)
	}
	files["tenants/premium/kustomization.yaml"] = list
	var log ObjectLog
	base, err := WriteTree(s, trees, plumbing.ZeroHash, files, &log)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		list = fmt.Appendf(list, "  - new-%d.yaml\n", i)
		var log ObjectLog
		base, err = WriteTree(s, trees, base, map[string][]byte{
			fmt.Sprintf("tenants/premium/new-%d.yaml", i): []byte("new\n"),
			"tenants/premium/kustomization.yaml":          list,
		}, &log)
		if err != nil {
			b.Fatal(err)
		}
	}
}
