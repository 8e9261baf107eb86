/* Fuzz: a Docker/OCI seccomp policy, as `moat policy check` and --policy
 * read it: sc_policy_parse, then sc_compile of what it accepted. */
#include "seccomp/internal.h"
#include "fuzz.h"

static struct sc_host host;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct moat_error err = { 0 };
	if (sc_host_detect(&host, &err) < 0)
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = fuzz_copy(data, size);
	struct sc_policy *pol = NULL;
	struct moat_error err = { 0 };
	if (sc_policy_parse(buf, size, &host, &pol, &err) == 0) {
		struct moat_seccomp_prog *prog = NULL;
		if (sc_compile(pol, &prog, &err) == 0 && (!prog || !prog->len))
			abort();
		moat_seccomp_prog_free(prog);
		sc_policy_free(pol);
	} else if (pol || !err.message) {
		abort();
	}
	moat_error_clear(&err);
	free(buf);
	return 0;
}
