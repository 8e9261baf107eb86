/* The namespace floor: the least any namespace sandbox must do on this host, for the
 * benchmark's "ns-floor" row. clone3 into the seven namespaces moat uses (user, pid,
 * mount, net, ipc, uts, cgroup), write the uid/gid maps (65534 inside, as moat), let
 * the child exec ARGV as pid 1 and wait for it. No mounts, no /proc, no seccomp, no
 * cgroups, no init: whatever a sandbox costs above this row is its own work.
 *
 *   nsfloor PROGRAM [ARGS...]     exit status: the program's (128+N if killed)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int write_file(pid_t pid, const char *name, const char *text)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text) ? 0 : -1;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: nsfloor PROGRAM [ARGS...]\n");
		return 2;
	}
	int sync[2];
	if (pipe2(sync, O_CLOEXEC) < 0)
		return 3;
	struct clone_args args;
	memset(&args, 0, sizeof args);
	args.flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC |
		     CLONE_NEWUTS | CLONE_NEWCGROUP;
	args.exit_signal = SIGCHLD;
	uid_t uid = getuid();
	gid_t gid = getgid();
	pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof args);
	if (pid < 0) {
		perror("nsfloor: clone3");
		return 3;
	}
	if (pid == 0) {
		char go;
		close(sync[1]);
		if (read(sync[0], &go, 1) != 1)
			_exit(125);
		execv(argv[1], argv + 1);
		_exit(127);
	}
	close(sync[0]);
	char map[64];
	/* as moat: rootless, the caller's ids become 65534; as root, 65534 stays 65534 */
	snprintf(map, sizeof map, "65534 %u 1\n", uid == 0 ? 65534u : (unsigned)uid);
	int rc = write_file(pid, "uid_map", map);
	if (rc == 0 && write_file(pid, "setgroups", "deny") < 0 && errno != ENOENT)
		rc = -1;
	snprintf(map, sizeof map, "65534 %u 1\n", gid == 0 ? 65534u : (unsigned)gid);
	if (rc == 0)
		rc = write_file(pid, "gid_map", map);
	if (rc < 0) {
		perror("nsfloor: id maps");
		kill(pid, SIGKILL);
	} else if (write(sync[1], "g", 1) != 1) {
		kill(pid, SIGKILL);
	}
	close(sync[1]);
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return 3;
	if (rc < 0)
		return 3;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
