/* The one shape of a library moat loads with dlopen (libcurl, libsystemd,
 * libhiredis, libmicrohttpd): opened once, on first use, its functions into
 * a table, all or nothing. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "core/sys.h"

void *moat_dl_open(const char *soname, const struct moat_dl_sym *syms, size_t n, void *fns,
		   size_t size, const char **lacks)
{
	*lacks = NULL;
	void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return NULL;
	char *tmp = malloc(size);
	if (!tmp) {
		dlclose(h);
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		void *p = dlsym(h, syms[i].name);
		if (!p || syms[i].off + sizeof p > size) {
			*lacks = syms[i].name;
			free(tmp);
			dlclose(h);
			return NULL;
		}
		memcpy(tmp + syms[i].off, &p, sizeof p);
	}
	memcpy(fns, tmp, size);
	free(tmp);
	return h;
}

void *moat_dl_load(struct moat_dl_once *o, const char *soname, const struct moat_dl_sym *syms,
		   size_t n, void *fns, size_t size, const char *cannot_open, const char *lacks)
{
	const char *missing;
	void *h = moat_dl_open(soname, syms, n, fns, size, &missing);
	if (!h)
		o->error = missing ? lacks : cannot_open;
	return h;
}

int moat_dl_once(struct moat_dl_once *o, void (*load)(void), const char **why)
{
	pthread_once(&o->once, load);
	if (o->error) {
		*why = o->error;
		return -1;
	}
	return 0;
}
