package testkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type PostgresServer struct {
	bin  string // the directory of initdb, pg_ctl and postgres
	dir  string // everything the server owns: data, socket, log
	port int
	cred *syscall.Credential // the user the server runs as; nil for this process's own user
}

const PostgresServerUser = "inboxtest"

// postgresBinDir returns the directory of the newest PostgreSQL server binaries: Debian and Ubuntu install each
// major version under /usr/lib/postgresql/<version>/bin, with only the client tools on PATH; elsewhere initdb and
// pg_ctl are usually on PATH.
func postgresBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var found []string
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "pg_ctl")) {
			found = append(found, d)
		}
	}
	if len(found) > 0 {
		slices.SortFunc(found, func(a, b string) int {
			return CompareVersions(filepath.Base(filepath.Dir(a)), filepath.Base(filepath.Dir(b)))
		})
		return found[len(found)-1], nil
	}
	initdb, err1 := exec.LookPath("initdb")
	_, err2 := exec.LookPath("pg_ctl")
	if err1 == nil && err2 == nil {
		return filepath.Dir(initdb), nil
	}
	return "", errors.New("the PostgreSQL server binaries (initdb, pg_ctl) are neither under /usr/lib/postgresql/<version>/bin " +
		"nor on PATH: install them (Debian: apt-get install postgresql)")
}

func CompareVersions(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(pa), len(pb)) {
		var na, nb int
		if i < len(pa) {
			na, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			nb, _ = strconv.Atoi(pb[i])
		}
		if na != nb {
			return na - nb
		}
	}
	return 0
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

func StartPostgres(ctx context.Context) (*PostgresServer, error) {
	bin, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	s := &PostgresServer{bin: bin}
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("PostgreSQL does not run as root, and there is no postgres user to run it as: %w", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if s.dir, err = os.MkdirTemp("", "inboxtest-pg-"); err != nil {
		return nil, err
	}
	if s.cred != nil {
		if err := os.Chown(s.dir, uid, gid); err != nil {
			os.RemoveAll(s.dir)
			return nil, err
		}
	}
	if s.port, err = loopbackPort(); err != nil {
		os.RemoveAll(s.dir)
		return nil, err
	}
	// Trust on loopback only, no locale to depend on, and no fsync while creating what is deleted afterwards.
	if err := s.run(ctx, "initdb", "-D", s.dataDir(), "-U", PostgresServerUser, "--auth=trust", "--no-locale",
		"-E", "UTF8", "--no-sync"); err != nil {
		os.RemoveAll(s.dir)
		return nil, err
	}
	// The socket goes in the server's own directory, so it never meets the system server's socket.
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -k '%s'", s.port, s.dir)
	if err := s.run(ctx, "pg_ctl", "-D", s.dataDir(), "-l", s.logFile(), "-o", opts, "-w", "-t", "60", "start"); err != nil {
		os.RemoveAll(s.dir)
		return nil, err
	}
	return s, nil
}

func (s *PostgresServer) dataDir() string { return filepath.Join(s.dir, "data") }
func (s *PostgresServer) logFile() string { return filepath.Join(s.dir, "server.log") }

// Dir is the directory that holds everything the server owns: its data, its socket and its log.
func (s *PostgresServer) Dir() string { return s.dir }

// DSN is the URL of the server's postgres database.
func (s *PostgresServer) DSN() string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", PostgresServerUser, s.port)
}

// Restart stops the server the way an operator's restart does (fast: sessions are ended, the transactions in
// flight roll back) and starts it again on the same port, returning once it accepts connections.
func (s *PostgresServer) Restart(ctx context.Context) error {
	return s.run(ctx, "pg_ctl", "-D", s.dataDir(), "-l", s.logFile(), "-m", "fast", "-w", "-t", "60", "restart")
}

// Stop shuts the server down and deletes its directory. If pg_ctl cannot stop it, the postmaster named in its pid
// file, which StartPostgres started, is killed, so no server outlives the directory it runs from.
func (s *PostgresServer) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := s.run(ctx, "pg_ctl", "-D", s.dataDir(), "-m", "immediate", "-w", "-t", "30", "stop")
	if err != nil {
		if b, rerr := os.ReadFile(filepath.Join(s.dataDir(), "postmaster.pid")); rerr == nil {
			if pid, perr := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0]); perr == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	return errors.Join(err, os.RemoveAll(s.dir))
}

// run runs one of the server's binaries as the server's user, from the server's directory (which that user can
// read, unlike perhaps the caller's), and returns its output with the error.
func (s *PostgresServer) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(s.logFile())
		return fmt.Errorf("%s %s: %w\n%s%s", name, strings.Join(args, " "), err, out, lastLines(string(log), 20))
	}
	return nil
}

// lastLines returns the last n lines of s, for an error message that shows why a server did not start.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// loopbackPort returns a loopback TCP port nobody listens on at the moment.
func loopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
