/* moat policy check FILE | moat policy show [FILE] */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

int cli_policy(int argc, char **argv)
{
	struct moat_error err = { 0 };
	int rc;
	if (argc == 3 && !strcmp(argv[1], "check")) {
		rc = moat_seccomp_policy_check(argv[2], &err);
		if (rc == 0)
			printf("%s: valid\n", argv[2]);
	} else if ((argc == 2 || argc == 3) && !strcmp(argv[1], "show")) {
		const char *path = argc == 3 ? argv[2] : NULL;
		size_t allowed = 0;
		rc = moat_seccomp_policy_show(path, stdout, &err);
		/* on stderr: stdout stays a policy file to start a --policy from */
		if (rc == 0)
			rc = moat_seccomp_policy_allowed(path, &allowed, &err);
		if (rc == 0)
			fprintf(stderr, "moat: policy: %zu system call names allowed (%s)\n", allowed,
				path ? path : "the default policy");
	} else {
		fputs("usage: moat policy check FILE | moat policy show [FILE]\n", stderr);
		return 2;
	}
	if (rc < 0) {
		rc = cli_fail(&err);
		moat_error_clear(&err);
		return rc;
	}
	return 0;
}
