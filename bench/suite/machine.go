package suite

import (
	"bufio"
	"hash/crc32"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Machine describes where the suite ran.
type Machine struct {
	CPUs      int
	CPUModel  string
	Kernel    string
	GoVersion string
	Hostname  string
	LoadStart string // /proc/loadavg 1, 5, 15 min when the suite started
	LoadEnd   string // and when it ended
	// ProbeStart and ProbeEnd time a fixed single-threaded workload
	// (CPUProbe) when the suite started and ended: on a shared VM the CPU
	// speed itself varies, and every figure here is CPU-bound.
	ProbeStart, ProbeEnd time.Duration
}

// CPUProbe times a fixed workload: CRC32C over 4 GiB, on one core.
func CPUProbe() time.Duration {
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	tab := crc32.MakeTable(crc32.Castagnoli)
	start := time.Now()
	var sum uint32
	for range 4096 {
		sum = crc32.Update(sum, tab, buf)
	}
	took := time.Since(start)
	runtime.KeepAlive(sum) // the result is unused; the loop must still run
	return took
}

// LoadAvg returns the 1, 5 and 15 minute load averages ("" if unknown).
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// DescribeMachine reads the machine's description.
func DescribeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), CPUModel: "unknown", Kernel: "unknown"}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:]) + " " + unix.ByteSliceToString(u.Machine[:])
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	m.Hostname, _ = os.Hostname()
	return m
}
