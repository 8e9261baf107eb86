/* moat version: moat's own version, then the libraries this binary runs with
 * and whether they are built in (static) or loaded at start (shared), so a
 * user can tell whether a library security update reached moat. */
#include <cJSON.h>
#include <dlfcn.h>
#include <netlink/msg.h>
#include <netlink/version.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/capability.h>

#include "cli/cli.h"

/* "shared" when sym lives in a shared object other than the executable. */
static const char *linkage(const void *sym, const char *soname)
{
	Dl_info info;
	if (!dladdr(sym, &info) || !info.dli_fname)
		return "unknown";
	return strstr(info.dli_fname, soname) ? "shared" : "static";
}

int cli_version(void)
{
	const struct scmp_version *sv = seccomp_version();
	printf("moat %s\n", MOAT_VERSION);
	printf("libseccomp %u.%u.%u (%s)\n", sv ? sv->major : 0, sv ? sv->minor : 0,
	       sv ? sv->micro : 0, linkage((const void *)seccomp_version, "libseccomp.so"));
	printf("libcap (%s)\n", linkage((const void *)cap_get_proc, "libcap.so"));
	printf("libnl-3 %d.%d.%d (%s)\n", nl_ver_maj, nl_ver_min, nl_ver_mic,
	       /* a function: a data symbol (nl_ver_num) is copied into the executable */
	       linkage((const void *)nlmsg_free, "libnl-3.so"));
	printf("cJSON %s (%s)\n", cJSON_Version(), linkage((const void *)cJSON_Version, "libcjson.so"));
	return 0;
}
