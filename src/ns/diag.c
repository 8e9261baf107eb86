/* Why a host refuses user namespaces, in one sentence with the fix. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ns/ns.h"

static long read_long(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	char buf[32];
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return strtol(buf, NULL, 10);
}

char *moat_userns_diagnose(void)
{
	char *s = NULL;
	int rc = 0;
	if (read_long("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == 1 && geteuid() != 0)
		rc = asprintf(&s, "AppArmor restricts unprivileged user namespaces "
			      "(kernel.apparmor_restrict_unprivileged_userns=1); fix: run "
			      "'sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0' or install "
			      "an AppArmor profile that grants moat 'userns,'");
	else if (read_long("/proc/sys/kernel/unprivileged_userns_clone") == 0 && geteuid() != 0)
		rc = asprintf(&s, "unprivileged user namespaces are disabled "
			      "(kernel.unprivileged_userns_clone=0); fix: run "
			      "'sudo sysctl kernel.unprivileged_userns_clone=1'");
	else if (read_long("/proc/sys/user/max_user_namespaces") == 0)
		rc = asprintf(&s, "user namespaces are disabled (user.max_user_namespaces=0); fix: run "
			      "'sudo sysctl user.max_user_namespaces=15000'");
	if (rc < 0)
		return NULL;
	return s;
}
