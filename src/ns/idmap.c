/* Supervisor side: uid/gid maps of the child's user namespace. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ns/ns.h"

static int write_proc(pid_t pid, const char *file, const char *text, struct moat_error *err)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, errno, "open %s: %s", path,
				      strerror(errno));
	size_t len = strlen(text);
	ssize_t n = write(fd, text, len);
	int saved = errno;
	close(fd);
	if (n != (ssize_t)len)
		return moat_error_set(err, MOAT_ERR_UNAVAILABLE, n < 0 ? saved : EIO,
				      "write %s (\"%.*s\"): %s", path, (int)strcspn(text, "\n"), text,
				      n < 0 ? strerror(saved) : "short write");
	return 0;
}

int moat_idmap_write(pid_t pid, bool as_root, uid_t host_uid, gid_t host_gid,
		     struct moat_error *err)
{
	char map[64];
	if (host_uid == 0 || host_gid == 0)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "the sandbox user may never map to host id 0");
	snprintf(map, sizeof map, "%u %u 1\n", MOAT_SANDBOX_UID, (unsigned)host_uid);
	if (write_proc(pid, "uid_map", map, err) < 0)
		return -1;
	/* Rootless, the kernel requires setgroups to be denied before gid_map is
	 * written. As root it stays allowed so the child can drop root's
	 * supplementary groups; the program never holds CAP_SETGID to use it. */
	if (!as_root && write_proc(pid, "setgroups", "deny\n", err) < 0)
		return -1;
	snprintf(map, sizeof map, "%u %u 1\n", MOAT_SANDBOX_GID, (unsigned)host_gid);
	return write_proc(pid, "gid_map", map, err);
}
