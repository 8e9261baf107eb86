/* tests/fixtures/ found from the checkout's top or beside the test binary
 * (fixture_path.h): one file both the unit and the integration binaries
 * link (the unit binary does not link tests/harness.c). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fixture_path.h"

const char *fixture_path(const char *rel)
{
	static char path[8192];
	snprintf(path, sizeof path, "tests/fixtures/%s", rel);
	if (access(path, R_OK) == 0)
		return path;
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0)
		return NULL;
	exe[n] = '\0';
	char *slash = strrchr(exe, '/');
	if (slash)
		*slash = '\0';
	snprintf(path, sizeof path, "%s/../tests/fixtures/%s", exe, rel);
	return access(path, R_OK) == 0 ? path : NULL;
}
