/* tests/fixtures/ for the unit tests (fixture.h). */
#include <stdio.h>
#include <stdlib.h>

#include <check.h>

#include "fixture.h"

cJSON *fixture_json(const char *rel)
{
	const char *path = fixture_path(rel);
	ck_assert_msg(path, "tests/fixtures/%s: cannot open", rel);
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
