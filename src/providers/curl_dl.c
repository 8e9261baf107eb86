/* Loads libcurl on first use (see curl_dl.h). */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

#include "core/sys.h"
#include "providers/curl_dl.h"

struct moat_curl_fns moat_curl_fns;

/* Written once, under once; read-only afterwards. */
static struct moat_dl_once once = MOAT_DL_ONCE_INIT;
static char version_error[160]; /* or the function it lacks */

/* 7.85.0: CURLOPT_PROTOCOLS_STR and CURLOPT_REDIR_PROTOCOLS_STR, which moat
 * sets to restrict requests to https. An older libcurl would refuse them;
 * moat refuses it first rather than ever run without the restriction. */
#define CURL_MIN_VERSION 0x075500

static const struct moat_dl_sym syms[] = {
#define S(field, name) { name, offsetof(struct moat_curl_fns, field) }
	S(global_init, "curl_global_init"), S(easy_init, "curl_easy_init"),
	S(easy_setopt, "curl_easy_setopt"), S(easy_perform, "curl_easy_perform"),
	S(easy_getinfo, "curl_easy_getinfo"), S(easy_cleanup, "curl_easy_cleanup"),
	S(easy_reset, "curl_easy_reset"), S(easy_strerror, "curl_easy_strerror"),
	S(easy_escape, "curl_easy_escape"), S(free, "curl_free"),
	S(slist_append, "curl_slist_append"), S(slist_free_all, "curl_slist_free_all"),
	S(url, "curl_url"), S(url_set, "curl_url_set"), S(url_get, "curl_url_get"),
	S(url_cleanup, "curl_url_cleanup"),
#undef S
};

static void load(void)
{
	const char *lacks;
	void *h = moat_dl_open("libcurl.so.4", syms, sizeof syms / sizeof syms[0], &moat_curl_fns,
			       sizeof moat_curl_fns, &lacks);
	if (!h) {
		if (lacks)
			snprintf(version_error, sizeof version_error,
				 "the installed libcurl lacks %s", lacks);
		once.error = lacks ? version_error
				   : "libcurl is not installed (Debian package libcurl4)";
		return;
	}
	curl_version_info_data *(*version_info)(CURLversion);
	*(void **)&version_info = dlsym(h, "curl_version_info");
	const curl_version_info_data *v = version_info ? version_info(CURLVERSION_NOW) : NULL;
	if (!v || v->version_num < CURL_MIN_VERSION) {
		snprintf(version_error, sizeof version_error,
			 "the installed libcurl (%s) is older than 7.85.0, which moat needs to "
			 "restrict remote requests to https (CURLOPT_PROTOCOLS_STR)",
			 v && v->version ? v->version : "unknown version");
		once.error = version_error;
		return;
	}
	if (moat_curl_fns.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		once.error = "libcurl could not be initialised";
}

int moat_curl_load(const char **why)
{
	return moat_dl_once(&once, load, why);
}
