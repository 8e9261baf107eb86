/* tests/fixtures/ for the unit tests (fixture.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "fixture.h"

cJSON *fixture_json(const char *rel)
{
	char path[8192];
	snprintf(path, sizeof path, "tests/fixtures/%s", rel);
	if (access(path, R_OK) != 0) {
		char exe[4096];
		ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
		ck_assert_int_gt(n, 0);
		exe[n] = '\0';
		*strrchr(exe, '/') = '\0';
		snprintf(path, sizeof path, "%s/../tests/fixtures/%s", exe, rel);
	}
	FILE *f = fopen(path, "re");
	ck_assert_msg(f, "tests/fixtures/%s: cannot open", rel);
	char *text = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(m);
	char chunk[4096];
	size_t got;
	while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
		fwrite(chunk, 1, got, m);
	fclose(f);
	fclose(m);
	cJSON *doc = cJSON_ParseWithLength(text, len);
	free(text);
	ck_assert_msg(doc, "tests/fixtures/%s: not JSON", rel);
	return doc;
}
