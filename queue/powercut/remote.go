package powercut

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A file system served by the process that maps its files deadlocks: bbolt
// reads its file through mmap, a thread faulting on a page of it waits in
// the kernel for the FUSE server, and the Go runtime cannot stop that
// thread, so a garbage collection that stops the world waits for it while
// the server's goroutines wait for the collection. Hence Start: the file
// system runs in a child process (the test binary again, which must call
// ServeIfChild from its TestMain), driven over a pipe.

// serveEnv names the directory a child process mounts on and serves.
const serveEnv = "IDEM_POWERCUT_SERVE"

// ServeIfChild, called first in TestMain, makes a process that Start
// began serve its file system, and exit; in any other process it returns.
func ServeIfChild() {
	dir := os.Getenv(serveEnv)
	if dir == "" {
		return
	}
	os.Exit(serve(dir, os.Stdin, os.Stdout, os.NewFile(3, "events")))
}

// serve mounts on dir and answers the commands of in on out until in ends;
// events hears "off N" when the power goes off after N cuts.
func serve(dir string, in io.Reader, out io.Writer, events io.Writer) int {
	p, err := Mount(dir)
	if err != nil {
		fmt.Fprintf(out, "err %v\n", err)
		return 1
	}
	var evMu sync.Mutex
	p.mu.Lock()
	p.onOff = func(cuts int) {
		evMu.Lock()
		defer evMu.Unlock()
		fmt.Fprintf(events, "off %d\n", cuts)
	}
	p.mu.Unlock()
	fmt.Fprintln(out, "ok")
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "arm":
			n, _ := strconv.ParseInt(f[1], 10, 64)
			p.Arm(n)
			fmt.Fprintln(out, "ok")
		case "off":
			p.PowerOff()
			fmt.Fprintln(out, "ok")
		case "ison":
			fmt.Fprintln(out, !p.IsOff())
		case "changes":
			fmt.Fprintln(out, p.Changes())
		case "cut":
			land, _ := strconv.ParseFloat(f[1], 64)
			seed, _ := strconv.ParseUint(f[3], 10, 64)
			rep := p.Cut(Plan{Land: land, Tear: f[2] == "true", Rand: newRand(seed)})
			fmt.Fprintln(out, rep.Pending, rep.Landed, rep.Torn, rep.Names)
		default:
			fmt.Fprintf(out, "err unknown command %q\n", f[0])
		}
	}
	if err := p.Unmount(); err != nil {
		// Something under it is still open: detach it, so that the
		// directory can be removed once that closes.
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		return 2
	}
	return 0
}

// Remote is a power-cut file system served by a child process (see Start),
// driven as FS is.
type Remote struct {
	dir string
	cmd *exec.Cmd

	mu  sync.Mutex // one command at a time
	in  io.WriteCloser
	out *bufio.Reader

	offMu sync.Mutex
	offc  chan struct{}
	cuts  int
}

// Start mounts an empty power-cut file system on dir, an empty directory,
// served by a child process: the test binary, run again, whose TestMain
// calls ServeIfChild. It needs /dev/fuse and the right to mount.
func Start(dir string) (*Remote, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("powercut: %w", err)
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("powercut: %w", err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"="+dir)
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = []*os.File{evW}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("powercut: %w", err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("powercut: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("powercut: start the server: %w", err)
	}
	evW.Close()
	r := &Remote{dir: dir, cmd: cmd, in: in, out: bufio.NewReader(outPipe), offc: make(chan struct{})}
	line, err := r.out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ok" {
		in.Close()
		_ = cmd.Wait()
		return nil, fmt.Errorf("powercut: the server did not mount: %q %v", strings.TrimSpace(line), err)
	}
	go r.watch(evR)
	return r, nil
}

// watch closes the power-off channel of the current cut when the server
// says the power went off.
func (r *Remote) watch(ev io.ReadCloser) {
	defer ev.Close()
	sc := bufio.NewScanner(ev)
	for sc.Scan() {
		var cuts int
		if _, err := fmt.Sscanf(sc.Text(), "off %d", &cuts); err != nil {
			continue
		}
		r.offMu.Lock()
		if cuts == r.cuts {
			select {
			case <-r.offc:
			default:
				close(r.offc)
			}
		}
		r.offMu.Unlock()
	}
}

// call sends a command and returns its answer.
func (r *Remote) call(format string, args ...any) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := fmt.Fprintf(r.in, format+"\n", args...); err != nil {
		panic(fmt.Sprintf("powercut: the server is gone: %v", err))
	}
	line, err := r.out.ReadString('\n')
	if err != nil {
		panic(fmt.Sprintf("powercut: the server is gone: %v", err))
	}
	return strings.TrimSpace(line)
}

// Dir is the directory the file system is mounted on.
func (r *Remote) Dir() string { return r.dir }

// Arm is FS.Arm.
func (r *Remote) Arm(n int64) { r.call("arm %d", n) }

// PowerOff is FS.PowerOff.
func (r *Remote) PowerOff() { r.call("off") }

// IsOff is FS.IsOff.
func (r *Remote) IsOff() bool { return r.call("ison") != "true" }

// Changes is FS.Changes.
func (r *Remote) Changes() int64 {
	n, _ := strconv.ParseInt(r.call("changes"), 10, 64)
	return n
}

// Off is FS.Off, closed once the server says the power went off (shortly
// after; IsOff asks it at once).
func (r *Remote) Off() <-chan struct{} {
	r.offMu.Lock()
	defer r.offMu.Unlock()
	return r.offc
}

// Cut is FS.Cut; plan.Rand draws the seed of the server's choices.
func (r *Remote) Cut(plan Plan) CutReport {
	if plan.Rand == nil {
		plan.Rand = newRand(0)
	}
	ans := r.call("cut %g %v %d", plan.Land, plan.Tear, plan.Rand.Uint64())
	var rep CutReport
	if _, err := fmt.Sscan(ans, &rep.Pending, &rep.Landed, &rep.Torn, &rep.Names); err != nil {
		panic(fmt.Sprintf("powercut: cut: %q: %v", ans, err))
	}
	r.offMu.Lock()
	r.cuts++
	select {
	case <-r.offc:
	default:
		close(r.offc)
	}
	r.offc = make(chan struct{})
	r.offMu.Unlock()
	return rep
}

// Stop unmounts the file system and waits for the server to exit.
func (r *Remote) Stop() error {
	r.in.Close()
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		_ = r.cmd.Process.Kill()
		return errors.New("powercut: the server did not exit in a minute; killed")
	}
}
