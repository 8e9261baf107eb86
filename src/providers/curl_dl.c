/* Loads libcurl on first use (see curl_dl.h). */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>

#include "providers/curl_dl.h"

struct moat_curl_fns moat_curl_fns;

/* Written once, under once; read-only afterwards. */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *load_error;
static char version_error[160];

/* 7.85.0: CURLOPT_PROTOCOLS_STR and CURLOPT_REDIR_PROTOCOLS_STR, which moat
 * sets to restrict requests to https. An older libcurl would refuse them;
 * moat refuses it first rather than ever run without the restriction. */
#define CURL_MIN_VERSION 0x075500

#define SYM(field, name)                                                   \
	do {                                                               \
		*(void **)&moat_curl_fns.field = dlsym(h, name);           \
		if (!moat_curl_fns.field) {                                \
			load_error = "the installed libcurl lacks " name;  \
			return;                                            \
		}                                                          \
	} while (0)

static void load(void)
{
	void *h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		load_error = "libcurl is not installed (Debian package libcurl4)";
		return;
	}
	SYM(global_init, "curl_global_init");
	SYM(easy_init, "curl_easy_init");
	SYM(easy_setopt, "curl_easy_setopt");
	SYM(easy_perform, "curl_easy_perform");
	SYM(easy_getinfo, "curl_easy_getinfo");
	SYM(easy_cleanup, "curl_easy_cleanup");
	SYM(easy_reset, "curl_easy_reset");
	SYM(easy_strerror, "curl_easy_strerror");
	SYM(easy_escape, "curl_easy_escape");
	SYM(free, "curl_free");
	SYM(slist_append, "curl_slist_append");
	SYM(slist_free_all, "curl_slist_free_all");
	SYM(url, "curl_url");
	SYM(url_set, "curl_url_set");
	SYM(url_get, "curl_url_get");
	SYM(url_cleanup, "curl_url_cleanup");
	curl_version_info_data *(*version_info)(CURLversion);
	*(void **)&version_info = dlsym(h, "curl_version_info");
	const curl_version_info_data *v = version_info ? version_info(CURLVERSION_NOW) : NULL;
	if (!v || v->version_num < CURL_MIN_VERSION) {
		snprintf(version_error, sizeof version_error,
			 "the installed libcurl (%s) is older than 7.85.0, which moat needs to "
			 "restrict remote requests to https (CURLOPT_PROTOCOLS_STR)",
			 v && v->version ? v->version : "unknown version");
		load_error = version_error;
		return;
	}
	if (moat_curl_fns.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		load_error = "libcurl could not be initialised";
}

int moat_curl_load(const char **why)
{
	pthread_once(&once, load);
	if (load_error) {
		*why = load_error;
		return -1;
	}
	return 0;
}
