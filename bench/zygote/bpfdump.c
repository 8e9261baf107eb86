/* bench/zygote/bpfdump.c -- write moat's default seccomp filter, exactly as
 * moat_seccomp_prepare() builds it for `moat run`, as a raw sock_filter array,
 * for the zygote prototype to install per request. Links build/libmoat.a.
 *   bpfdump OUT.bpf */

#include <stdio.h>
#include "moat.h"
#include "seccomp/internal.h"

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: bpfdump OUT.bpf\n");
		return 2;
	}
	struct moat_error err = { 0 };
	struct moat_seccomp_prog *prog = NULL;
	if (moat_seccomp_prepare(NULL, false, &prog, &err) < 0) {
		fprintf(stderr, "bpfdump: moat_seccomp_prepare failed\n");
		return 1;
	}
	FILE *f = fopen(argv[1], "wbe");
	if (!f || fwrite(prog->insns, sizeof *prog->insns, prog->len, f) != prog->len ||
	    fclose(f) != 0) {
		perror("bpfdump: write");
		return 1;
	}
	printf("%u instructions\n", (unsigned)prog->len);
	moat_seccomp_prog_free(prog);
	return 0;
}
