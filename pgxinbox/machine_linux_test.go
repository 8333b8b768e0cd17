package pgxinbox_test

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
)

// machineTicks reads the machine's CPU time so far from /proc/stat (see procStat).
func machineTicks() (busy, idle int64, cpus int, ok bool) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	defer f.Close()
	return procStat(f)
}

// procStat reads, from text in /proc/stat's format, the CPU time summed over every CPU, in clock ticks: busy
// (user, nice, system, irq, softirq, steal) and idle (idle, iowait), with the number of CPUs. Only ratios of its
// differences are used, so the tick's length does not matter.
func procStat(r io.Reader) (busy, idle int64, cpus int, ok bool) {
	s := bufio.NewScanner(r)
	total := false
	for s.Scan() {
		fields := strings.Fields(s.Text())
		switch {
		case len(fields) > 8 && fields[0] == "cpu":
			var v [8]int64
			for k := range v {
				n, err := strconv.ParseInt(fields[k+1], 10, 64)
				if err != nil {
					return 0, 0, 0, false
				}
				v[k] = n
			}
			busy, idle, total = v[0]+v[1]+v[2]+v[5]+v[6]+v[7], v[3]+v[4], true
		case len(fields) > 0 && len(fields[0]) > 3 && strings.HasPrefix(fields[0], "cpu"):
			cpus++
		}
	}
	return busy, idle, cpus, total && cpus > 0 && s.Err() == nil
}

func TestProcStat(t *testing.T) {
	const stat = `cpu  100 2 30 500 7 1 4 6 0 0
cpu0 50 1 15 250 3 1 2 3 0 0
cpu1 50 1 15 250 4 0 2 3 0 0
intr 12345 0 0
ctxt 999
`
	busy, idle, cpus, ok := procStat(strings.NewReader(stat))
	if !ok || busy != 100+2+30+1+4+6 || idle != 500+7 || cpus != 2 {
		t.Fatalf("procStat = busy %d, idle %d, %d CPUs, ok %v; want busy 143, idle 507, 2 CPUs, ok", busy, idle, cpus, ok)
	}
	if _, _, _, ok := procStat(strings.NewReader("cpu  1 2 x 4 5 6 7 8\ncpu0 1 2 3 4 5 6 7 8\n")); ok {
		t.Fatal("procStat read a total line with a field that is not a number")
	}
	if _, _, _, ok := procStat(strings.NewReader("intr 1\n")); ok {
		t.Fatal("procStat read a text without CPU lines")
	}
	if busy, idle, cpus, ok := machineTicks(); !ok || busy+idle <= 0 || cpus <= 0 {
		t.Fatalf("machineTicks = busy %d, idle %d, %d CPUs, ok %v; want the machine's", busy, idle, cpus, ok)
	}
}
