/* what builds and tests do to their own files: reserve space, vectored I/O
 * with flags, sync, readahead, watch a directory, memfd */
#define _GNU_SOURCE
#include "wl.h"
#include <fcntl.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
const char *wl_prog = "t_files";
int wl_failed;

static int inotify_sees(const char *dir)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	char path[4096];
	int fd = inotify_init1(IN_CLOEXEC);
	if (fd < 0)
		return 0;
	int ok = inotify_add_watch(fd, dir, IN_CREATE) >= 0;
	snprintf(path, sizeof path, "%s/watched", dir);
	int f = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	if (f >= 0)
		close(f);
	ok = ok && f >= 0 && read(fd, buf, sizeof buf) > 0;
	close(fd);
	return ok;
}

int main(void)
{
	char dir[] = "wl-files-XXXXXX", path[64];
	struct stat st;
	char a[4] = "abcd", b[4];
	struct iovec iov = {a, sizeof a}, iovr = {b, sizeof b};
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(path, sizeof path, "%s/f", dir);
	int fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
	WL_CHECK("open", fd >= 0);
	WL_CHECK("posix_fallocate", posix_fallocate(fd, 0, 1 << 20) == 0 && fstat(fd, &st) == 0 &&
					   st.st_size == 1 << 20);
	WL_CHECK("fallocate", fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 2 << 20) == 0);
	WL_CHECK("pwritev2", pwritev2(fd, &iov, 1, 0, RWF_DSYNC) == 4);
	WL_CHECK("preadv2", preadv2(fd, &iovr, 1, 0, 0) == 4 && memcmp(a, b, 4) == 0);
	WL_CHECK("sync_file_range", sync_file_range(fd, 0, 4, SYNC_FILE_RANGE_WRITE) == 0);
	WL_CHECK("fdatasync", fdatasync(fd) == 0);
	WL_CHECK("syncfs", syncfs(fd) == 0);
	WL_CHECK("readahead", readahead(fd, 0, 4096) == 0);
	sync();
	WL_CHECK("inotify", inotify_sees(dir));
	int m = memfd_create("wl", MFD_CLOEXEC);
	WL_CHECK("memfd_create", m >= 0 && write(m, "x", 1) == 1);
	if (m >= 0)
		close(m);
	if (fd >= 0)
		close(fd);
	char rm[128];
	snprintf(rm, sizeof rm, "rm -rf %s", dir);
	return system(rm) != 0 || wl_failed;
}
