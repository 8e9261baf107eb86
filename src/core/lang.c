/* The language table: request names, file extensions, interpreters. */
#include <string.h>

#include "core/core.h"

static const struct moat_lang_info langs[MOAT_LANG__COUNT] = {
	[MOAT_LANG_PYTHON] = { MOAT_LANG_PYTHON, "python", "py", "python3", NULL },
	[MOAT_LANG_JAVASCRIPT] = { MOAT_LANG_JAVASCRIPT, "javascript", "js", "node", NULL },
	[MOAT_LANG_TYPESCRIPT] = { MOAT_LANG_TYPESCRIPT, "typescript", "ts", "node", "esbuild" },
	[MOAT_LANG_BASH] = { MOAT_LANG_BASH, "bash", "sh", "bash", NULL },
	[MOAT_LANG_SH] = { MOAT_LANG_SH, "sh", "sh", "sh", NULL },
};

struct lang_alias {
	const char *name;
	enum moat_language id;
};

/* Canonical names first, then aliases; all case-sensitive. */
static const struct lang_alias names[] = {
	{ "python", MOAT_LANG_PYTHON },
	{ "javascript", MOAT_LANG_JAVASCRIPT },
	{ "typescript", MOAT_LANG_TYPESCRIPT },
	{ "bash", MOAT_LANG_BASH },
	{ "sh", MOAT_LANG_SH },
	{ "py", MOAT_LANG_PYTHON },
	{ "python3", MOAT_LANG_PYTHON },
	{ "js", MOAT_LANG_JAVASCRIPT },
	{ "node", MOAT_LANG_JAVASCRIPT },
	{ "ts", MOAT_LANG_TYPESCRIPT },
	{ "shell", MOAT_LANG_SH },
};

static const struct lang_alias exts[] = {
	{ "py", MOAT_LANG_PYTHON },
	{ "js", MOAT_LANG_JAVASCRIPT },
	{ "mjs", MOAT_LANG_JAVASCRIPT },
	{ "cjs", MOAT_LANG_JAVASCRIPT },
	{ "ts", MOAT_LANG_TYPESCRIPT },
	{ "mts", MOAT_LANG_TYPESCRIPT },
	{ "sh", MOAT_LANG_SH },
	{ "bash", MOAT_LANG_BASH },
};

const struct moat_lang_info *moat_lang_get(enum moat_language id)
{
	if ((unsigned)id >= MOAT_LANG__COUNT)
		return NULL;
	return &langs[id];
}

int moat_lang_from_name(const char *name, enum moat_language *out)
{
	if (!name)
		return -1;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (strcmp(name, names[i].name) == 0) {
			if (out)
				*out = names[i].id;
			return 0;
		}
	}
	return -1;
}

int moat_lang_from_path(const char *path, enum moat_language *out)
{
	if (!path)
		return -1;
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	const char *dot = strrchr(base, '.');
	if (!dot || dot == base) /* no extension, or a dotfile such as ".sh" */
		return -1;
	for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
		if (strcmp(dot + 1, exts[i].name) == 0) {
			if (out)
				*out = exts[i].id;
			return 0;
		}
	}
	return -1;
}
