// Go's os/exec and signals (tests/workloads/README.md): os/exec waits with
// waitid, so a Go program that runs a command needs it.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func check(name string, err error) {
	if err != nil {
		fmt.Printf("\n@@wl fail go.%s: %s\n", name, strings.Join(strings.Fields(err.Error()), " "))
	} else {
		fmt.Printf("\n@@wl ok go.%s\n", name)
	}
}

func main() {
	out, err := exec.Command("sh", "-c", "echo hello").Output()
	if err == nil && string(out) != "hello\n" {
		err = fmt.Errorf("output %q", out)
	}
	check("exec_output", err)

	err = exec.Command("sh", "-c", "exit 3").Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 3 {
		err = nil
	} else if err == nil {
		err = fmt.Errorf("exit 0, want 3")
	}
	check("exec_exit_code", err)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err = exec.CommandContext(ctx, "sleep", "10").Run()
	if err != nil && time.Since(t0) < 5*time.Second {
		err = nil
	} else {
		err = fmt.Errorf("sleep not killed: %v after %v", err, time.Since(t0))
	}
	check("exec_context_kill", err)

	cmd := exec.Command("cat")
	cmd.Stdin = strings.NewReader("piped")
	out, err = cmd.Output()
	if err == nil && string(out) != "piped" {
		err = fmt.Errorf("output %q", out)
	}
	check("exec_stdin", err)

	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	syscall.Kill(os.Getpid(), syscall.SIGUSR1)
	select {
	case <-ch:
		err = nil
	case <-time.After(5 * time.Second):
		err = fmt.Errorf("no SIGUSR1")
	}
	check("signal_notify", err)
}
