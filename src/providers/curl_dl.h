/* libcurl, loaded on first use: only the remote providers need it, and
 * linking it would make every sandbox start pay for loading ~30 libraries.
 * Include this instead of <curl/curl.h>; the curl_* names below then call
 * through the loaded table. */
#ifndef MOAT_PROVIDERS_CURL_DL_H
#define MOAT_PROVIDERS_CURL_DL_H

#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

struct moat_curl_fns {
	CURLcode (*global_init)(long);
	CURL *(*easy_init)(void);
	CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
	CURLcode (*easy_perform)(CURL *);
	CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
	void (*easy_cleanup)(CURL *);
	void (*easy_reset)(CURL *);
	const char *(*easy_strerror)(CURLcode);
	char *(*easy_escape)(CURL *, const char *, int);
	void (*free)(void *);
	struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
	void (*slist_free_all)(struct curl_slist *);
	CURLU *(*url)(void);
	CURLUcode (*url_set)(CURLU *, CURLUPart, const char *, unsigned int);
	CURLUcode (*url_get)(const CURLU *, CURLUPart, char **, unsigned int);
	void (*url_cleanup)(CURLU *);
};

extern struct moat_curl_fns moat_curl_fns;

/* Loads libcurl and runs curl_global_init once. 0, or -1 with a sentence
 * in *why (static text) when libcurl cannot be used. Thread-safe. */
int moat_curl_load(const char **why);

#define curl_global_init (moat_curl_fns.global_init)
#define curl_easy_init (moat_curl_fns.easy_init)
#undef curl_easy_setopt
#define curl_easy_setopt (moat_curl_fns.easy_setopt)
#define curl_easy_perform (moat_curl_fns.easy_perform)
#undef curl_easy_getinfo
#define curl_easy_getinfo (moat_curl_fns.easy_getinfo)
#define curl_easy_cleanup (moat_curl_fns.easy_cleanup)
#define curl_easy_reset (moat_curl_fns.easy_reset)
#define curl_easy_strerror (moat_curl_fns.easy_strerror)
#define curl_easy_escape (moat_curl_fns.easy_escape)
#define curl_free (moat_curl_fns.free)
#define curl_slist_append (moat_curl_fns.slist_append)
#define curl_slist_free_all (moat_curl_fns.slist_free_all)
#define curl_url (moat_curl_fns.url)
#define curl_url_set (moat_curl_fns.url_set)
#define curl_url_get (moat_curl_fns.url_get)
#define curl_url_cleanup (moat_curl_fns.url_cleanup)

#endif
