package bench

import "golang.org/x/sys/unix"

// adviseHugePages asks for transparent huge pages for b (best effort).
func adviseHugePages(b []byte) {
	if len(b) > 0 {
		_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	}
}
