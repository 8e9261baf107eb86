/* Unit tests: seccomp policies (src/seccomp): parsing and validation with
 * JSON paths, includes/excludes, compilation, the BPF cache, SHA-256, the
 * default policy installed for real in a forked child, and --seccomp-log: the
 * notify rewrite, the classic-BPF interpreter (checked against the kernel's
 * own verdicts), the listener and the JSON log. Here: SHA-256, parsing,
 * compilation, the default policy's rule, policy check/show, and the suite;
 * the cache is in test_seccomp_cache.c, the rest in test_seccomp_installed.c,
 * over seccomp_common.c. */
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <poll.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <check.h>
#include <cjson/cJSON.h>

#include "moat_admin.h"
#include "suites.h"
#include "skip.h"
#include "moat.h"
#include "core/embedded.h"
#include "seccomp/internal.h"
#include "seccomp_common.h"
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

/* ---- SHA-256 ---- */


START_TEST(sha256_vectors)
{
	static const struct {
		const char *in, *out;
	} v[] = {
		{ "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
		{ "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
		{ "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
		  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
		{ "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
		  "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1" },
	};
	uint8_t d[MOAT_SHA256_LEN];
	char h[65];
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		moat_sha256(v[i].in, strlen(v[i].in), d);
		secpol_hex(d, sizeof d, h);
		ck_assert_str_eq(h, v[i].out);
	}
	/* one million 'a', fed in odd-sized pieces */
	struct moat_sha256_ctx s;
	moat_sha256_init(&s);
	char chunk[997];
	memset(chunk, 'a', sizeof chunk);
	size_t left = 1000000;
	while (left) {
		size_t n = left < sizeof chunk ? left : sizeof chunk;
		moat_sha256_update(&s, chunk, n);
		left -= n;
	}
	moat_sha256_final(&s, d);
	secpol_hex(d, sizeof d, h);
	ck_assert_str_eq(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	/* byte by byte == one shot, across block boundaries */
	uint8_t msg[300], d2[MOAT_SHA256_LEN];
	for (size_t i = 0; i < sizeof msg; i++)
		msg[i] = (uint8_t)(i * 7 + 3);
	for (size_t len = 0; len <= sizeof msg; len += 1) {
		moat_sha256(msg, len, d);
		moat_sha256_init(&s);
		for (size_t i = 0; i < len; i++)
			moat_sha256_update(&s, &msg[i], 1);
		moat_sha256_final(&s, d2);
		ck_assert_mem_eq(d, d2, MOAT_SHA256_LEN);
	}
}
END_TEST

/* ---- parsing: every field ---- */

START_TEST(parse_all_fields)
{
	struct sc_policy *p = secpol_parse_ok(
		"{\"comment\": \"c\", \"defaultAction\": \"SCMP_ACT_ERRNO\", \"defaultErrnoRet\": 13,"
		" \"flags\": [\"SECCOMP_FILTER_FLAG_LOG\"], \"listenerPath\": \"\","
		" \"listenerMetadata\": \"\","
		" \"architectures\": [\"SCMP_ARCH_X86_64\", \"SCMP_ARCH_AARCH64\"],"
		" \"archMap\": [{\"architecture\": \"SCMP_ARCH_X86_64\","
		"   \"subArchitectures\": [\"SCMP_ARCH_X86\", \"SCMP_ARCH_X32\"]}],"
		" \"syscalls\": ["
		"  {\"names\": [\"read\", \"write\"], \"action\": \"SCMP_ACT_ALLOW\", \"comment\": \"x\","
		"   \"args\": null, \"includes\": {}, \"excludes\": {}},"
		"  {\"name\": \"getpid\", \"action\": \"SCMP_ACT_ERRNO\", \"errnoRet\": 38},"
		"  {\"names\": [\"getppid\"], \"action\": \"SCMP_ACT_ERRNO\"},"
		"  {\"names\": [\"socket\"], \"action\": \"SCMP_ACT_ALLOW\", \"args\": ["
		"    {\"index\": 0, \"value\": 1, \"op\": \"SCMP_CMP_EQ\"},"
		"    {\"index\": 1, \"value\": 2, \"op\": \"SCMP_CMP_NE\"},"
		"    {\"index\": 2, \"value\": 3, \"op\": \"SCMP_CMP_LT\"},"
		"    {\"index\": 3, \"value\": 4, \"op\": \"SCMP_CMP_LE\"},"
		"    {\"index\": 4, \"value\": 5, \"op\": \"SCMP_CMP_GE\"},"
		"    {\"index\": 5, \"value\": 240, \"valueTwo\": 16, \"op\": \"SCMP_CMP_MASKED_EQ\"}]},"
		"  {\"names\": [\"kill\"], \"action\": \"SCMP_ACT_ALLOW\", \"args\": ["
		"    {\"index\": 0, \"value\": 4294967295, \"op\": \"SCMP_CMP_GT\"}]},"
		"  {\"names\": [\"tkill\"], \"action\": \"SCMP_ACT_KILL\"},"
		"  {\"names\": [\"tgkill\"], \"action\": \"SCMP_ACT_KILL_THREAD\"},"
		"  {\"names\": [\"vhangup\"], \"action\": \"SCMP_ACT_KILL_PROCESS\"},"
		"  {\"names\": [\"sync\"], \"action\": \"SCMP_ACT_TRAP\"},"
		"  {\"names\": [\"syncfs\"], \"action\": \"SCMP_ACT_LOG\"}"
		" ]}");
	ck_assert_uint_eq(p->default_action, SCMP_ACT_ERRNO(13));
	ck_assert(p->flag_log);
	ck_assert_uint_eq(p->n_rules, 10);
	ck_assert_uint_eq(p->rules[0].n_names, 2);
	ck_assert_str_eq(p->rules[0].names[1], "write");
	ck_assert_int_eq(p->rules[0].nrs[0], SCMP_SYS(read));
	ck_assert_uint_eq(p->rules[0].action, SCMP_ACT_ALLOW);
	ck_assert(p->rules[0].applies);
	ck_assert_str_eq(p->rules[1].names[0], "getpid");
	ck_assert_uint_eq(p->rules[1].action, SCMP_ACT_ERRNO(38));
	/* ERRNO without errnoRet: defaultErrnoRet */
	ck_assert_uint_eq(p->rules[2].action, SCMP_ACT_ERRNO(13));
	const struct sc_rule *s = &p->rules[3];
	ck_assert_uint_eq(s->n_conds, 6);
	ck_assert_int_eq(s->conds[0].op, SCMP_CMP_EQ);
	ck_assert_int_eq(s->conds[1].op, SCMP_CMP_NE);
	ck_assert_int_eq(s->conds[2].op, SCMP_CMP_LT);
	ck_assert_int_eq(s->conds[3].op, SCMP_CMP_LE);
	ck_assert_int_eq(s->conds[4].op, SCMP_CMP_GE);
	ck_assert_int_eq(s->conds[5].op, SCMP_CMP_MASKED_EQ);
	ck_assert_uint_eq(s->conds[5].index, 5);
	ck_assert_uint_eq(s->conds[5].value, 240);
	ck_assert_uint_eq(s->conds[5].value_two, 16);
	ck_assert_int_eq(p->rules[4].conds[0].op, SCMP_CMP_GT);
	ck_assert_uint_eq(p->rules[4].conds[0].value, 4294967295u);
	ck_assert_uint_eq(p->rules[5].action, SCMP_ACT_KILL_THREAD);
	ck_assert_uint_eq(p->rules[6].action, SCMP_ACT_KILL_THREAD);
	ck_assert_uint_eq(p->rules[7].action, SCMP_ACT_KILL_PROCESS);
	ck_assert_uint_eq(p->rules[8].action, SCMP_ACT_TRAP);
	ck_assert_uint_eq(p->rules[9].action, SCMP_ACT_LOG);
	/* a foreign architecture is recorded as a note */
	ck_assert_uint_ge(p->n_notes, 1);
	ck_assert_ptr_nonnull(strstr(p->notes[0], "only the native architecture"));

	struct moat_error err = { 0 };
	struct moat_seccomp_prog *prog = NULL;
	ck_assert_int_eq(sc_compile(p, &prog, &err), 0);
	ck_assert(prog->log); /* from "flags" */
	ck_assert_uint_gt(prog->len, 10);
	moat_seccomp_prog_free(prog);
	sc_policy_free(p);
}
END_TEST

START_TEST(parse_default_errno_is_eperm)
{
	struct sc_policy *p = secpol_parse_ok("{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": ["
				       "{\"names\": [\"read\"], \"action\": \"SCMP_ACT_ERRNO\"}]}");
	ck_assert_uint_eq(p->default_action, SCMP_ACT_ERRNO(EPERM));
	ck_assert_uint_eq(p->rules[0].action, SCMP_ACT_ERRNO(EPERM));
	ck_assert(!p->flag_log);
	sc_policy_free(p);
	p = secpol_parse_ok("{\"defaultAction\": \"SCMP_ACT_ALLOW\"}");
	ck_assert_uint_eq(p->default_action, SCMP_ACT_ALLOW);
	ck_assert_uint_eq(p->n_rules, 0);
	sc_policy_free(p);
}
END_TEST

START_TEST(unknown_names_skipped_with_notes)
{
	struct sc_policy *p = secpol_parse_ok(
		"{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": [{\"names\": "
		"[\"read\", \"no_such_syscall\", \"socketcall\"], \"action\": \"SCMP_ACT_ALLOW\"}]}");
	ck_assert_uint_eq(p->rules[0].n_names, SCMP_SYS(socketcall) < 0 ? 1 : 2);
	ck_assert_uint_ge(p->n_notes, 1);
	ck_assert_ptr_nonnull(strstr(p->notes[0], "syscalls[0].names[1]: \"no_such_syscall\""));
	ck_assert_ptr_nonnull(strstr(p->notes[0], "skipped"));
	struct moat_error err = { 0 };
	struct moat_seccomp_prog *prog = NULL;
	ck_assert_int_eq(sc_compile(p, &prog, &err), 0);
	moat_seccomp_prog_free(prog);
	sc_policy_free(p);
}
END_TEST

START_TEST(includes_excludes)
{
	struct sc_host h = secpol_host();
	if (strcmp(h.arch_name, "amd64") != 0) {
		/* the cases below are written for x86_64 */
		harness_skip("%s: the cases are for amd64, this host is %s",
			__func__, h.arch_name);
		return;
	}
	static const struct {
		const char *filter;
		bool applies;
	} cases[] = {
		{ "\"includes\": {\"arches\": [\"amd64\", \"x32\"]}", true },
		{ "\"includes\": {\"arches\": [\"arm64\"]}", false },
		{ "\"includes\": {\"arches\": []}", true },
		{ "\"excludes\": {\"arches\": [\"amd64\"]}", false },
		{ "\"excludes\": {\"arches\": [\"s390\", \"386\"]}", true },
		{ "\"includes\": {\"caps\": [\"CAP_SYS_ADMIN\"]}", false },
		{ "\"includes\": {\"caps\": []}", true },
		{ "\"excludes\": {\"caps\": [\"CAP_SYS_ADMIN\"]}", true },
		{ "\"includes\": {\"minKernel\": \"4.8\"}", true },
		{ "\"includes\": {\"minKernel\": \"5.10\"}", true },
		{ "\"includes\": {\"minKernel\": \"5.10.1\"}", false },
		{ "\"includes\": {\"minKernel\": \"6.1\"}", false },
		{ "\"excludes\": {\"minKernel\": \"5.10\"}", false },
		{ "\"excludes\": {\"minKernel\": \"6.0\"}", true },
		{ "\"includes\": {\"arches\": [\"amd64\"], \"minKernel\": \"6.0\"}", false },
		{ "\"includes\": {\"arches\": [\"amd64\"]}, \"excludes\": {\"caps\": [\"CAP_BPF\"]}", true },
		{ "\"excludes\": {\"caps\": [\"CAP_SYS_ADMIN\"], \"arches\": [\"amd64\"]}", false },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char *json = NULL;
		ck_assert_int_ge(asprintf(&json,
					  "{\"defaultAction\": \"SCMP_ACT_ERRNO\", \"syscalls\": ["
					  "{\"names\": [\"read\"], \"action\": \"SCMP_ACT_ALLOW\", %s}]}",
					  cases[i].filter),
				 0);
		struct sc_policy *p = secpol_parse_ok(json);
		ck_assert_msg(p->rules[0].applies == cases[i].applies, "case %zu: %s", i,
			      cases[i].filter);
		sc_policy_free(p);
		free(json);
	}
}
END_TEST

/* ---- parsing: every error names its JSON path ---- */

#define OK3 "{\"names\": [\"read\"], \"action\": \"SCMP_ACT_ALLOW\"},"
#define HEAD "{\"defaultAction\": \"SCMP_ACT_ERRNO\", "
#define HEAD_ALLOW "{\"defaultAction\": \"SCMP_ACT_ALLOW\", "
#define SYS(entry) HEAD "\"syscalls\": [" entry "]}"
#define ARG(a) SYS("{\"names\": [\"read\"], \"action\": \"SCMP_ACT_ALLOW\", \"args\": [" a "]}")
#define INC(f) SYS("{\"names\": [\"read\"], \"action\": \"SCMP_ACT_ALLOW\", " f "}")

static const struct {
	const char *json, *msg;
} bad[] = {
	{ "[]", "(top level): expected a JSON object" },
	{ "{", "invalid JSON at line 1" },
	{ "{\"defaultAction\": \"SCMP_ACT_ALLOW\"}\n x", "invalid JSON at line 2, column 2" },
	{ "{\n \"defaultAction\": \"SCMP_ACT_ALLOW\",\n}", "invalid JSON at line 3" },
	{ "{}", "defaultAction: missing" },
	{ "{\"defaultAction\": \"SCMP_ACT_FOO\"}", "defaultAction: unknown action \"SCMP_ACT_FOO\"" },
	{ "{\"defaultAction\": \"SCMP_ACT_TRACE\"}", "defaultAction: SCMP_ACT_TRACE is not supported" },
	{ "{\"defaultAction\": \"SCMP_ACT_NOTIFY\"}", "defaultAction: SCMP_ACT_NOTIFY is not supported" },
	{ "{\"defaultAction\": 1}", "defaultAction: expected a string" },
	{ HEAD "\"defaultErrnoRet\": 0}", "defaultErrnoRet: 0 out of range (1 to 4095)" },
	{ HEAD "\"defaultErrnoRet\": 4096}", "defaultErrnoRet: 4096 out of range" },
	{ HEAD "\"defaultErrnoRet\": \"1\"}", "defaultErrnoRet: expected an integer" },
	{ HEAD "\"defaultErrnoRet\": 1.5}", "defaultErrnoRet: expected an integer" },
	{ HEAD "\"foo\": 1}", "(top level): unknown field \"foo\"" },
	{ HEAD "\"includes\": {}}", "(top level): unknown field \"includes\"" },
	{ HEAD "\"a\\u0001b\": 1}", "(top level): unknown field \"a\\x01b\"" },
	{ HEAD "\"defaultAction\": \"SCMP_ACT_ALLOW\"}", "(top level): duplicate field \"defaultAction\"" },
	{ HEAD "\"listenerPath\": \"/run/agent.sock\"}", "listenerPath: not supported" },
	{ HEAD "\"listenerMetadata\": \"x\"}", "listenerMetadata: not supported" },
	{ HEAD "\"listenerPath\": 3}", "listenerPath: expected a string" },
	{ HEAD "\"comment\": 3}", "comment: expected a string" },
	{ HEAD "\"flags\": \"SECCOMP_FILTER_FLAG_LOG\"}", "flags: expected an array" },
	{ HEAD "\"flags\": [\"SECCOMP_FILTER_FLAG_LOG\", \"SECCOMP_FILTER_FLAG_SPEC_ALLOW\"]}",
	  "flags[1]: unsupported flag \"SECCOMP_FILTER_FLAG_SPEC_ALLOW\"" },
	{ HEAD "\"flags\": [1]}", "flags[0]: expected a string" },
	{ HEAD "\"architectures\": [\"SCMP_ARCH_X86_64\", \"SCMP_ARCH_FOO\"]}",
	  "architectures[1]: unknown architecture \"SCMP_ARCH_FOO\"" },
	{ HEAD "\"architectures\": \"SCMP_ARCH_X86_64\"}", "architectures: expected an array" },
	{ HEAD "\"archMap\": [{\"architecture\": \"SCMP_ARCH_X86_64\", \"subArchitectures\": [\"SCMP_ARCH_BAR\"]}]}",
	  "archMap[0].subArchitectures[0]: unknown architecture \"SCMP_ARCH_BAR\"" },
	{ HEAD "\"archMap\": [{\"arch\": \"x\"}]}", "archMap[0]: unknown field \"arch\"" },
	{ HEAD "\"archMap\": [{}]}", "archMap[0].architecture: missing" },
	{ HEAD "\"archMap\": [1]}", "archMap[0]: expected an object" },
	{ HEAD "\"syscalls\": {}}", "syscalls: expected an array" },
	{ SYS("1"), "syscalls[0]: expected an object" },
	{ SYS(OK3 "{\"action\": \"SCMP_ACT_ALLOW\"}"), "syscalls[1]: missing \"names\"" },
	{ SYS(OK3 OK3 "{\"names\": [\"read\", 5], \"action\": \"SCMP_ACT_ALLOW\"}"),
	  "syscalls[2].names[1]: expected a string" },
	{ SYS("{\"names\": [], \"action\": \"SCMP_ACT_ALLOW\"}"), "syscalls[0].names: empty" },
	{ SYS("{\"names\": \"read\", \"action\": \"SCMP_ACT_ALLOW\"}"), "syscalls[0].names: expected an array" },
	{ SYS("{\"names\": [\"\"], \"action\": \"SCMP_ACT_ALLOW\"}"),
	  "syscalls[0].names[0]: expected a non-empty syscall name" },
	{ SYS("{\"name\": 7, \"action\": \"SCMP_ACT_ALLOW\"}"), "syscalls[0].name: expected a string" },
	{ SYS("{\"name\": \"read\", \"names\": [\"read\"], \"action\": \"SCMP_ACT_ALLOW\"}"),
	  "syscalls[0]: has both \"name\" and \"names\"" },
	{ SYS("{\"names\": [\"read\"]}"), "syscalls[0]: missing \"action\"" },
	{ SYS("{\"names\": [\"read\"], \"action\": \"SCMP_ACT_TRACE\"}"),
	  "syscalls[0].action: SCMP_ACT_TRACE is not supported" },
	{ SYS("{\"names\": [\"read\"], \"action\": \"SCMP_ACT_NOTIFY\"}"),
	  "syscalls[0].action: SCMP_ACT_NOTIFY is not supported" },
	{ SYS("{\"names\": [\"read\"], \"action\": \"allow\"}"), "syscalls[0].action: unknown action \"allow\"" },
	{ SYS("{\"names\": [\"read\"], \"action\": \"SCMP_ACT_ALLOW\", \"errnoRet\": 1}"),
	  "syscalls[0].errnoRet: only valid with SCMP_ACT_ERRNO" },
	{ SYS("{\"names\": [\"read\"], \"action\": \"SCMP_ACT_ERRNO\", \"errnoRet\": 5000}"),
	  "syscalls[0].errnoRet: 5000 out of range" },
	{ SYS("{\"names\": [\"read\"], \"action\": \"SCMP_ACT_ERRNO\", \"errnoRet\": -1}"),
	  "syscalls[0].errnoRet: expected a non-negative integer" },
	{ SYS("{\"names\": [\"read\"], \"action\": \"SCMP_ACT_ALLOW\", \"foo\": 1}"),
	  "syscalls[0]: unknown field \"foo\"" },
	{ SYS("{\"names\": [\"read\"], \"action\": \"SCMP_ACT_ALLOW\", \"comment\": 1}"),
	  "syscalls[0].comment: expected a string" },
	{ SYS("{\"names\": [\"read\"], \"action\": \"SCMP_ACT_ALLOW\", \"args\": {}}"),
	  "syscalls[0].args: expected an array" },
	{ SYS(OK3 OK3 OK3 "{\"names\": [\"read\"], \"action\": \"SCMP_ACT_ALLOW\", \"args\": ["
			  "{\"index\": 0, \"value\": 1, \"op\": \"SCMP_CMP_FOO\"}]}"),
	  "syscalls[3].args[0].op: unknown operator \"SCMP_CMP_FOO\"" },
	{ ARG("{\"index\": 6, \"value\": 1, \"op\": \"SCMP_CMP_EQ\"}"),
	  "syscalls[0].args[0].index: 6 out of range (0 to 5)" },
	{ ARG("{\"index\": \"0\", \"value\": 1, \"op\": \"SCMP_CMP_EQ\"}"),
	  "syscalls[0].args[0].index: expected an integer" },
	{ ARG("{\"index\": 0, \"value\": -1, \"op\": \"SCMP_CMP_EQ\"}"),
	  "syscalls[0].args[0].value: expected a non-negative integer" },
	{ ARG("{\"index\": 0, \"value\": 1e300, \"op\": \"SCMP_CMP_EQ\"}"),
	  "syscalls[0].args[0].value: integer too large" },
	{ ARG("{\"index\": 0, \"value\": 0.5, \"op\": \"SCMP_CMP_EQ\"}"),
	  "syscalls[0].args[0].value: expected an integer" },
	{ ARG("{\"index\": 0, \"value\": 1}"), "syscalls[0].args[0]: missing \"op\"" },
	{ ARG("{\"value\": 1, \"op\": \"SCMP_CMP_EQ\"}"), "syscalls[0].args[0]: missing \"index\"" },
	{ ARG("{\"index\": 0, \"op\": \"SCMP_CMP_EQ\"}"), "syscalls[0].args[0]: missing \"value\"" },
	{ ARG("{\"index\": 0, \"value\": 1, \"op\": 3}"), "syscalls[0].args[0].op: expected a string" },
	{ ARG("{\"index\": 0, \"value\": 1, \"op\": \"SCMP_CMP_EQ\"}, "
	      "{\"index\": 1, \"value\": 1, \"op\": \"SCMP_CMP_EQ\", \"valueThree\": 1}"),
	  "syscalls[0].args[1]: unknown field \"valueThree\"" },
	{ ARG("{\"index\": 0, \"value\": 1, \"valueTwo\": 2, \"op\": \"SCMP_CMP_EQ\"}"),
	  "syscalls[0].args[0].valueTwo: only meaningful with SCMP_CMP_MASKED_EQ" },
	{ ARG("1"), "syscalls[0].args[0]: expected an object" },
	/* MASKED_EQ with valueTwo bits outside the mask: libseccomp would
	 * compile (arg & value) == (valueTwo & value), another rule */
	{ HEAD_ALLOW "\"syscalls\": [{\"names\": [\"mmap\"], \"action\": \"SCMP_ACT_ERRNO\", "
		     "\"args\": [{\"index\": 2, \"value\": 9, \"valueTwo\": 4, "
		     "\"op\": \"SCMP_CMP_MASKED_EQ\"}]}]}",
	  "syscalls[0].args[0].valueTwo: 0x4 has bits outside the mask (value 0x9)" },
	{ SYS(OK3 "{\"names\": [\"personality\"], \"action\": \"SCMP_ACT_ALLOW\", \"args\": ["
		  "{\"index\": 1, \"value\": 0, \"op\": \"SCMP_CMP_GE\"},"
		  "{\"index\": 0, \"value\": 255, \"valueTwo\": 256, "
		  "\"op\": \"SCMP_CMP_MASKED_EQ\"}]}"),
	  "syscalls[1].args[1].valueTwo: 0x100 has bits outside the mask (value 0xff)" },
	{ INC("\"includes\": []"), "syscalls[0].includes: expected an object" },
	{ INC("\"includes\": {\"foo\": 1}"), "syscalls[0].includes: unknown field \"foo\"" },
	{ INC("\"excludes\": {\"kernel\": \"4.8\"}"), "syscalls[0].excludes: unknown field \"kernel\"" },
	{ INC("\"includes\": {\"arches\": [\"amd64\", \"vax\"]}"),
	  "syscalls[0].includes.arches[1]: unknown architecture \"vax\"" },
	{ INC("\"includes\": {\"arches\": \"amd64\"}"), "syscalls[0].includes.arches: expected an array" },
	{ INC("\"includes\": {\"caps\": [\"SYS_ADMIN\"]}"),
	  "syscalls[0].includes.caps[0]: not a capability name \"SYS_ADMIN\"" },
	{ INC("\"excludes\": {\"caps\": [1]}"), "syscalls[0].excludes.caps[0]: expected a string" },
	{ INC("\"excludes\": {\"minKernel\": \"4\"}"), "syscalls[0].excludes.minKernel: bad kernel version \"4\"" },
	{ INC("\"includes\": {\"minKernel\": \"4.x\"}"), "syscalls[0].includes.minKernel: bad kernel version" },
	{ INC("\"includes\": {\"minKernel\": 4.8}"), "syscalls[0].includes.minKernel: expected a string" },
};

START_TEST(parse_errors_name_the_path)
{
	struct sc_host h = secpol_host();
	struct moat_error err = { 0 };
	struct sc_policy *p = (struct sc_policy *)1;
	int rc = sc_policy_parse(bad[_i].json, strlen(bad[_i].json), &h, &p, &err);
	ck_assert_msg(rc == -1, "case %d accepted: %s", _i, bad[_i].json);
	ck_assert_ptr_null(p);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	ck_assert_ptr_nonnull(err.message);
	ck_assert_msg(strstr(err.message, bad[_i].msg) != NULL, "case %d: got \"%s\", want \"%s\"",
		      _i, err.message, bad[_i].msg);
	moat_error_clear(&err);
}
END_TEST

/* SCMP_CMP_MASKED_EQ: valueTwo within the mask is accepted and compiles to
 * exactly (arg & value) == valueTwo; bits outside the mask are refused above
 * (parse_errors_name_the_path) because libseccomp would compile
 * (arg & value) == (valueTwo & value): the second half shows that filter. */
static uint32_t verdict_of(const struct moat_seccomp_prog *prog, const char *name, uint64_t a0,
			   uint64_t a1, uint64_t a2)
{
	struct seccomp_data d = { .nr = seccomp_syscall_resolve_name(name),
				  .arch = seccomp_arch_native(),
				  .args = { a0, a1, a2 } };
	uint32_t ret = 0;
	ck_assert_int_eq(sc_bpf_run(prog->insns, prog->len, &d, &ret), 0);
	return ret;
}

START_TEST(masked_eq_value_two_within_mask)
{
	struct moat_error err = { 0 };
	struct sc_policy *p = secpol_parse_ok(
		SYS("{\"names\": [\"personality\"], \"action\": \"SCMP_ACT_ALLOW\", \"args\": ["
		    "{\"index\": 0, \"value\": 255, \"valueTwo\": 16, \"op\": \"SCMP_CMP_MASKED_EQ\"}]},"
		    "{\"names\": [\"ioctl\"], \"action\": \"SCMP_ACT_ALLOW\", \"args\": ["
		    "{\"index\": 1, \"value\": 4294967295, \"valueTwo\": 21522, "
		    "\"op\": \"SCMP_CMP_MASKED_EQ\"}]},"
		    "{\"names\": [\"unshare\"], \"action\": \"SCMP_ACT_ALLOW\", \"args\": ["
		    "{\"index\": 0, \"value\": 2114060288, \"op\": \"SCMP_CMP_MASKED_EQ\"}]},"
		    "{\"names\": [\"setns\"], \"action\": \"SCMP_ACT_ALLOW\", \"args\": ["
		    "{\"index\": 1, \"value\": 12, \"valueTwo\": 12, \"op\": \"SCMP_CMP_MASKED_EQ\"}]}"));
	ck_assert_uint_eq(p->rules[0].conds[0].value_two, 16);
	struct moat_seccomp_prog *prog = NULL;
	ck_assert_msg(sc_compile(p, &prog, &err) == 0, "%s", err.message);
	const uint32_t allow = SCMP_ACT_ALLOW, eperm = SCMP_ACT_ERRNO(EPERM);
	ck_assert_uint_eq(verdict_of(prog, "personality", 0x10, 0, 0), allow);
	ck_assert_uint_eq(verdict_of(prog, "personality", 0x310, 0, 0), allow);
	ck_assert_uint_eq(verdict_of(prog, "personality", 0, 0, 0), eperm);
	ck_assert_uint_eq(verdict_of(prog, "personality", 0x11, 0, 0), eperm);
	ck_assert_uint_eq(verdict_of(prog, "ioctl", 0, 21522, 0), allow);
	ck_assert_uint_eq(verdict_of(prog, "ioctl", 0, 0xffffffff00000000ULL | 21522, 0), allow);
	ck_assert_uint_eq(verdict_of(prog, "ioctl", 0, 21523, 0), eperm);
	ck_assert_uint_eq(verdict_of(prog, "unshare", 0, 0, 0), allow);
	ck_assert_uint_eq(verdict_of(prog, "unshare", 0x10000000 /* CLONE_NEWUSER */, 0, 0), eperm);
	ck_assert_uint_eq(verdict_of(prog, "setns", 0, 12, 0), allow);
	ck_assert_uint_eq(verdict_of(prog, "setns", 0, 4, 0), eperm);
	moat_seccomp_prog_free(prog);
	sc_policy_free(p);

	/* What the refused rules would have compiled to (the parser refuses
	 * them, so the condition is set behind its back). */
	p = secpol_parse_ok(HEAD_ALLOW "\"syscalls\": [{\"names\": [\"mmap\"], \"action\": "
				"\"SCMP_ACT_ERRNO\", \"args\": [{\"index\": 2, \"value\": 9, "
				"\"op\": \"SCMP_CMP_MASKED_EQ\"}]}]}");
	p->rules[0].conds[0].value_two = 4; /* (prot & 9) == 4: never */
	ck_assert_msg(sc_compile(p, &prog, &err) == 0, "%s", err.message);
	/* mmap(..., PROT_NONE, ...) refused by a rule that can never match */
	ck_assert_uint_eq(verdict_of(prog, "mmap", 0, 4096, 0 /* PROT_NONE */), eperm);
	moat_seccomp_prog_free(prog);
	sc_policy_free(p);
	p = secpol_parse_ok(SYS("{\"names\": [\"personality\"], \"action\": \"SCMP_ACT_ALLOW\", \"args\": ["
			 "{\"index\": 0, \"value\": 255, \"op\": \"SCMP_CMP_MASKED_EQ\"}]}"));
	p->rules[0].conds[0].value_two = 0x100; /* (persona & 0xff) == 0x100: never */
	ck_assert_msg(sc_compile(p, &prog, &err) == 0, "%s", err.message);
	ck_assert_uint_eq(verdict_of(prog, "personality", 0, 0, 0), allow);
	moat_seccomp_prog_free(prog);
	sc_policy_free(p);
}
END_TEST

/* ---- compilation ---- */

static int compile_json(const char *json, struct moat_error *err, unsigned short *len)
{
	struct sc_policy *p = secpol_parse_ok(json);
	struct moat_seccomp_prog *prog = NULL;
	int rc = sc_compile(p, &prog, err);
	if (rc == 0 && len)
		*len = prog->len;
	moat_seccomp_prog_free(prog);
	sc_policy_free(p);
	return rc;
}

START_TEST(compile_conflicts_are_rejected)
{
	struct moat_error err = { 0 };
	/* libseccomp would drop the conditional denial next to an unconditional allow */
	ck_assert_int_eq(compile_json(SYS("{\"names\": [\"ioctl\"], \"action\": \"SCMP_ACT_ALLOW\"},"
					  "{\"names\": [\"ioctl\"], \"action\": \"SCMP_ACT_ERRNO\", "
					  "\"errnoRet\": 13, \"args\": [{\"index\": 1, \"value\": 21522, "
					  "\"op\": \"SCMP_CMP_EQ\"}]}"),
				     &err, NULL),
			 -1);
	ck_assert_ptr_nonnull(strstr(err.message, "syscalls[1]: the conditional rule for \"ioctl\" "
						  "is overridden by the unconditional rule syscalls[0]"));
	/* a conditional rule with the default action next to an allow */
	ck_assert_int_eq(compile_json(SYS("{\"names\": [\"ioctl\"], \"action\": \"SCMP_ACT_ERRNO\", "
					  "\"args\": [{\"index\": 1, \"value\": 21522, \"op\": "
					  "\"SCMP_CMP_EQ\"}]},"
					  "{\"names\": [\"ioctl\"], \"action\": \"SCMP_ACT_ALLOW\", "
					  "\"args\": [{\"index\": 0, \"value\": 0, \"op\": \"SCMP_CMP_GE\"}]}"),
				     &err, NULL),
			 -1);
	ck_assert_ptr_nonnull(strstr(err.message, "syscalls[0]: a conditional rule for \"ioctl\" with "
						  "the default action"));
	/* two unconditional rules, two actions: allowed and (explicitly) denied */
	ck_assert_int_eq(compile_json(SYS("{\"names\": [\"read\", \"ptrace\"], \"action\": \"SCMP_ACT_ALLOW\"},"
					  "{\"names\": [\"ptrace\"], \"action\": \"SCMP_ACT_ERRNO\"}"),
				     &err, NULL),
			 -1);
	ck_assert_ptr_nonnull(strstr(err.message, "syscalls[0]: \"ptrace\" is given another action by syscalls[1]"));
	moat_error_clear(&err);
	/* the default action alone is a no-op; same-index conditions become separate rules */
	unsigned short len = 0;
	ck_assert_int_eq(compile_json(SYS("{\"names\": [\"read\"], \"action\": \"SCMP_ACT_ERRNO\"},"
					  "{\"names\": [\"personality\"], \"action\": \"SCMP_ACT_ALLOW\", "
					  "\"args\": [{\"index\": 0, \"value\": 0, \"op\": \"SCMP_CMP_EQ\"},"
					  "{\"index\": 0, \"value\": 8, \"op\": \"SCMP_CMP_EQ\"}]}"),
				     &err, &len),
			 0);
	ck_assert_uint_gt(len, 0);
}
END_TEST

START_TEST(docker_fixture_loads_and_compiles)
{
	const char *path = secpol_docker_fixture();
	ck_assert_msg(path != NULL, DOCKER_FIXTURE " not found");
	struct moat_error err = { 0 };
	char *buf;
	size_t len;
	ck_assert_int_eq(sc_policy_read(path, &buf, &len, &err), 0);
	struct sc_host h;
	ck_assert_int_eq(sc_host_detect(&h, &err), 0);
	struct sc_policy *p = NULL;
	ck_assert_msg(sc_policy_parse(buf, len, &h, &p, &err) == 0, "%s", err.message);
	free(buf);
	ck_assert_uint_eq(p->default_action, SCMP_ACT_ERRNO(1));
	size_t applied = 0, skipped = 0;
	for (size_t i = 0; i < p->n_rules; i++)
		p->rules[i].applies ? applied++ : skipped++;
	ck_assert_uint_gt(applied, 5);
	ck_assert_uint_gt(skipped, 5); /* rules that need capabilities */
	struct moat_seccomp_prog *prog = NULL;
	ck_assert_msg(sc_compile(p, &prog, &err) == 0, "%s", err.message);
	ck_assert_uint_gt(prog->len, 100);
	moat_seccomp_prog_free(prog);
	sc_policy_free(p);
	/* and through the public entry points */
	ck_assert_int_eq(sc_policy_check(path, NULL, &err), 0);
	sc_cache_set_dir("");
	ck_assert_int_eq(moat_seccomp_prepare(path, false, &prog, &err), 0);
	moat_seccomp_prog_free(prog);
	sc_cache_set_dir(NULL);
}
END_TEST

/* The families the default policy refuses (SECURITY.md row 90: the rule),
 * every name of each: none may ever be allowed, conditionally or not
 * (DESIGN.md §4 invariant 4). Conditional ones of other calls (clone with
 * namespace flags, personality, ioctl, socket) are exercised in the child
 * test. */
static const struct {
	const char *family;
	const char *const names[16];
} refused_families[] = {
	{ "io_uring", { "io_uring_setup", "io_uring_enter", "io_uring_register" } },
	{ "bpf", { "bpf" } },
	{ "userfaultfd", { "userfaultfd" } },
	{ "perf_event_open", { "perf_event_open" } },
	{ "the key calls", { "keyctl", "add_key", "request_key" } },
	{ "mount, namespace and pivot calls",
	  { "mount", "umount2", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount",
	    "open_tree", "mount_setattr", "pivot_root", "chroot", "unshare", "setns", "clone3" } },
	{ "ptrace and cross-process memory and descriptors",
	  { "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd",
	    "kcmp" } },
	{ "module and kexec loading",
	  { "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load" } },
	{ "file handles", { "open_by_handle_at", "name_to_handle_at" } },
	{ "raw I/O ports", { "ioperm", "iopl" } },
	{ "setting the clocks", { "settimeofday", "clock_settime", "clock_adjtime", "adjtimex" } },
	{ "host and domain names", { "sethostname", "setdomainname" } },
	{ "swap, reboot, process accounting, quotas and the kernel log",
	  { "swapon", "swapoff", "reboot", "acct", "quotactl", "quotactl_fd", "syslog" } },
	{ "NUMA page moving and placement",
	  { "move_pages", "migrate_pages", "mbind", "set_mempolicy", "set_mempolicy_home_node" } },
	{ "fanotify", { "fanotify_init", "fanotify_mark" } },
	{ "memfd_secret", { "memfd_secret" } },
	{ "obsolete and legacy calls",
	  { "uselib", "_sysctl", "ustat", "sysfs", "nfsservctl", "lookup_dcookie", "modify_ldt",
	    "vhangup", "remap_file_pages" } },
};
#define N_FAMILIES (sizeof refused_families / sizeof refused_families[0])

/* The family that refuses name, or NULL. */
static const char *refused_family_of(const char *name)
{
	for (size_t f = 0; f < N_FAMILIES; f++)
		for (size_t k = 0; refused_families[f].names[k]; k++)
			if (!strcmp(refused_families[f].names[k], name))
				return refused_families[f].family;
	return NULL;
}

START_TEST(default_policy_loads_and_compiles)
{
	struct moat_error err = { 0 };
	char *buf;
	size_t len;
	ck_assert_int_eq(sc_policy_read(NULL, &buf, &len, &err), 0);
	ck_assert_uint_eq(len, moat_embedded_default_policy_len);
	struct sc_host h;
	ck_assert_int_eq(sc_host_detect(&h, &err), 0);
	struct sc_policy *p = NULL;
	ck_assert_msg(sc_policy_parse(buf, len, &h, &p, &err) == 0, "%s", err.message);
	free(buf);
	ck_assert_uint_eq(p->default_action, SCMP_ACT_ERRNO(EPERM));
	ck_assert_uint_eq(p->n_notes, 0); /* every name known on this host */
	for (size_t f = 0; f < N_FAMILIES; f++)
		for (size_t k = 0; refused_families[f].names[k]; k++) {
			int nr = seccomp_syscall_resolve_name(refused_families[f].names[k]);
			for (size_t i = 0; i < p->n_rules; i++) {
				const struct sc_rule *r = &p->rules[i];
				if (!r->applies || r->action == p->default_action)
					continue;
				for (size_t n = 0; n < r->n_names; n++)
					ck_assert_msg(r->nrs[n] != nr || r->action != SCMP_ACT_ALLOW,
						      "default policy allows %s",
						      refused_families[f].names[k]);
			}
		}
	struct moat_seccomp_prog *prog = NULL;
	ck_assert_msg(sc_compile(p, &prog, &err) == 0, "%s", err.message);
	ck_assert(!prog->log);
	moat_seccomp_prog_free(prog);
	sc_policy_free(p);
}
END_TEST

/* ---- the default policy's rule, size and evidence (issues 37, 43) ---- */

#define EVIDENCE_UNION "policies/evidence/union.txt"
#define DEFAULT_MAX_ALLOWED 230
/* The comment that opens each refused family's entry (then the family, then
 * why); an allowing entry's comment says how the kernel confines its calls,
 * at least this long. */
#define REFUSED_PREFIX "refused: "
#define MIN_REASON 40

static bool entry_names(const cJSON *entry, const char *name)
{
	const cJSON *n;
	cJSON_ArrayForEach(n, cJSON_GetObjectItemCaseSensitive(entry, "names"))
		if (cJSON_IsString(n) && !strcmp(n->valuestring, name))
			return true;
	return false;
}

static bool entry_allows(const cJSON *entry)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(entry, "action");
	return cJSON_IsString(a) && !strcmp(a->valuestring, "SCMP_ACT_ALLOW");
}

static const char *entry_comment(const cJSON *entry)
{
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(entry, "comment");
	return cJSON_IsString(c) ? c->valuestring : "";
}

static cJSON *default_policy_json(void)
{
	struct moat_error err = { 0 };
	char *buf;
	size_t len;
	ck_assert_int_eq(sc_policy_read(NULL, &buf, &len, &err), 0);
	cJSON *j = cJSON_ParseWithLength(buf, len);
	free(buf);
	ck_assert_ptr_nonnull(j);
	return j;
}

/* The evidence's union, one name a line (malloc'd names, NULL-terminated). */
static char **evidence_union(size_t *n)
{
	FILE *f = fopen(EVIDENCE_UNION, "re");
	ck_assert_msg(f, "%s: %s (run from the repository's root)", EVIDENCE_UNION,
		      strerror(errno));
	char **names = NULL, *line = NULL;
	size_t cap = 0;
	*n = 0;
	ssize_t len;
	while ((len = getline(&line, &cap, f)) > 0) {
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == ' '))
			line[--len] = '\0';
		if (!len)
			continue;
		names = realloc(names, (*n + 2) * sizeof *names);
		ck_assert_ptr_nonnull(names);
		names[(*n)++] = strdup(line);
		names[*n] = NULL;
	}
	free(line);
	fclose(f);
	ck_assert_uint_gt(*n, 50);
	return names;
}

/* At most DEFAULT_MAX_ALLOWED names are allowed, counted over the file (every
 * architecture's rules) and as the compiler sees it on this host, which is
 * what `moat policy show` prints. */
START_TEST(default_policy_allows_at_most_230)
{
	cJSON *j = default_policy_json();
	const cJSON *e, *n;
	size_t in_file = 0;
	cJSON *seen = cJSON_CreateObject();
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "syscalls")) {
		if (!entry_allows(e))
			continue;
		cJSON_ArrayForEach(n, cJSON_GetObjectItemCaseSensitive(e, "names")) {
			if (cJSON_GetObjectItemCaseSensitive(seen, n->valuestring))
				continue;
			cJSON_AddTrueToObject(seen, n->valuestring);
			in_file++;
		}
	}
	cJSON_Delete(seen);
	cJSON_Delete(j);
	ck_assert_msg(in_file <= DEFAULT_MAX_ALLOWED, "the default policy allows %zu names", in_file);
	struct moat_error err = { 0 };
	size_t here = 0;
	ck_assert_int_eq(moat_seccomp_policy_allowed(NULL, &here, &err), 0);
	ck_assert_uint_le(here, in_file);
	ck_assert_uint_gt(here, 100);
}
END_TEST

static bool entry_is_conditional(const cJSON *entry)
{
	return cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(entry, "args")) > 0;
}

/* Every name of every refused family: no allowing entry names it, not even
 * under a condition; an entry of its family refuses it, whose comment starts
 * "refused: <family>" and says why (clone3: its own ENOSYS entry); the
 * program compiled here answers it with an errno. Fails if a family's call
 * is ever allowed (the rule, SECURITY.md row 90). */
START_TEST(default_policy_refuses_the_risky_families)
{
	cJSON *j = default_policy_json();
	const cJSON *calls = cJSON_GetObjectItemCaseSensitive(j, "syscalls");
	struct moat_seccomp_prog *prog = NULL;
	struct moat_error err = { 0 };
	sc_cache_set_dir("");
	ck_assert_msg(moat_seccomp_prepare(NULL, false, &prog, &err) == 0, "%s", err.message);
	sc_cache_set_dir(NULL);
	size_t checked = 0;
	for (size_t f = 0; f < N_FAMILIES; f++) {
		for (size_t k = 0; refused_families[f].names[k]; k++) {
			const char *name = refused_families[f].names[k];
			bool refused = false;
			const cJSON *e;
			cJSON_ArrayForEach(e, calls) {
				if (!entry_names(e, name))
					continue;
				ck_assert_msg(!entry_allows(e),
					      "the default policy allows %s (%s), of the refused "
					      "family \"%s\"%s",
					      name, entry_comment(e), refused_families[f].family,
					      entry_is_conditional(e) ? " (conditionally)" : "");
				const char *c = entry_comment(e);
				if (!strcmp(name, "clone3") ||
				    (!strncmp(c, REFUSED_PREFIX, strlen(REFUSED_PREFIX)) &&
				     !strncmp(c + strlen(REFUSED_PREFIX), refused_families[f].family,
					      strlen(refused_families[f].family)) &&
				     strlen(c) > MIN_REASON))
					refused = true;
			}
			ck_assert_msg(refused,
				      "%s: no entry \"" REFUSED_PREFIX "%s. <why>\" in the default policy",
				      name, refused_families[f].family);
			int nr = seccomp_syscall_resolve_name(name);
			if (nr < 0)
				continue; /* not a call of this architecture */
			struct seccomp_data d = { .nr = nr, .arch = seccomp_arch_native() };
			uint32_t ret;
			ck_assert_int_eq(sc_bpf_run(prog->insns, prog->len, &d, &ret), 0);
			ck_assert_msg((ret & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_ERRNO,
				      "%s: the compiled default answers %#x, not an errno", name, ret);
			checked++;
		}
	}
	ck_assert_uint_gt(checked, 60);
	moat_seccomp_prog_free(prog);
	cJSON_Delete(j);
}
END_TEST

/* Every name a traced workload made (policies/evidence/) is allowed, or is
 * one of a refused family's: a call real programs make is never refused for
 * anything but its risk. Every allowing entry says why the kernel confines
 * its calls (the rule for adding a call, SECURITY.md row 90). */
START_TEST(evidence_union_is_allowed_or_refused)
{
	cJSON *j = default_policy_json();
	const cJSON *calls = cJSON_GetObjectItemCaseSensitive(j, "syscalls");
	size_t n;
	char **names = evidence_union(&n);
	for (size_t i = 0; i < n; i++) {
		bool allowed = false;
		const cJSON *e;
		cJSON_ArrayForEach(e, calls)
			allowed = allowed || (entry_names(e, names[i]) && entry_allows(e));
		ck_assert_msg(allowed || refused_family_of(names[i]),
			      "%s is in the evidence (%s) but neither allowed by the default "
			      "policy nor in a refused family",
			      names[i], EVIDENCE_UNION);
	}
	const cJSON *e;
	cJSON_ArrayForEach(e, calls) {
		if (entry_allows(e))
			ck_assert_msg(strlen(entry_comment(e)) > MIN_REASON,
				      "an allowing entry without a reason: \"%s\"", entry_comment(e));
		else if (!strncmp(entry_comment(e), REFUSED_PREFIX, strlen(REFUSED_PREFIX))) {
			/* each refused entry is a family of the list above */
			const cJSON *nm;
			cJSON_ArrayForEach(nm, cJSON_GetObjectItemCaseSensitive(e, "names"))
				ck_assert_msg(refused_family_of(nm->valuestring),
					      "%s is refused by \"%s\" but in no family of this test",
					      nm->valuestring, entry_comment(e));
		}
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	cJSON_Delete(j);
}
END_TEST

/* The Python zygote's filter (policies/zygote.json) allows every name the
 * default does: its children run under the default stacked on it, and must
 * be able to do what a cold run does. */
START_TEST(zygote_policy_allows_what_the_default_does)
{
	cJSON *d = default_policy_json();
	cJSON *z = cJSON_ParseWithLength((const char *)moat_embedded_zygote_policy,
					 moat_embedded_zygote_policy_len);
	ck_assert_ptr_nonnull(z);
	const cJSON *e, *n, *ze;
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(d, "syscalls")) {
		if (!entry_allows(e))
			continue;
		cJSON_ArrayForEach(n, cJSON_GetObjectItemCaseSensitive(e, "names")) {
			bool found = false;
			cJSON_ArrayForEach(ze, cJSON_GetObjectItemCaseSensitive(z, "syscalls"))
				found = found || (entry_allows(ze) && entry_names(ze, n->valuestring));
			ck_assert_msg(found, "the default allows %s, the zygote's policy does not",
				      n->valuestring);
		}
	}
	cJSON_Delete(z);
	cJSON_Delete(d);
}
END_TEST

/* moat_seccomp_policy_allowed counts distinct names of the allowing rules
 * that apply here: conditional ones once, refused and other-arch ones not. */
START_TEST(policy_allowed_count)
{
	char *dir = secpol_tmpdir();
	struct moat_error err = { 0 };
	char *path = secpol_write_tmp(
		dir, "count.json",
		SYS("{\"names\": [\"read\", \"write\", \"read\"], \"action\": \"SCMP_ACT_ALLOW\"},"
		    "{\"names\": [\"socket\"], \"action\": \"SCMP_ACT_ALLOW\", \"args\": [{\"index\": 0, "
		    "\"value\": 1, \"op\": \"SCMP_CMP_EQ\"}]},"
		    "{\"names\": [\"socket\"], \"action\": \"SCMP_ACT_ALLOW\", \"args\": [{\"index\": 0, "
		    "\"value\": 2, \"op\": \"SCMP_CMP_EQ\"}]},"
		    "{\"names\": [\"close\"], \"action\": \"SCMP_ACT_ALLOW\", \"includes\": "
		    "{\"arches\": [\"s390x\"]}},"
		    "{\"names\": [\"ptrace\", \"not_a_syscall\"], \"action\": \"SCMP_ACT_ERRNO\"}"));
	size_t count = 99;
	ck_assert_msg(moat_seccomp_policy_allowed(path, &count, &err) == 0, "%s", err.message);
	ck_assert_uint_eq(count, 3); /* read, write, socket */
	ck_assert_int_eq(moat_seccomp_policy_allowed("/nonexistent/p.json", &count, &err), -1);
	ck_assert_int_eq(err.sys_errno, ENOENT);
	moat_error_clear(&err);
	free(path);
	secpol_rm_rf(dir);
	free(dir);
}
END_TEST

/* ---- policy check / show ---- */

START_TEST(policy_check_and_show)
{
	char *dir = secpol_tmpdir();
	struct moat_error err = { 0 };
	char *bad_path = secpol_write_tmp(dir, "bad.json",
				   SYS(OK3 OK3 OK3 "{\"names\": [\"read\"], \"action\": \"SCMP_ACT_ALLOW\", "
						   "\"args\": [{\"index\": 0, \"value\": 1, "
						   "\"op\": \"SCMP_CMP_FOO\"}]}"));
	ck_assert_int_eq(moat_seccomp_policy_check(bad_path, &err), -1);
	ck_assert_int_eq(err.type, MOAT_ERR_CONFIG);
	ck_assert_ptr_nonnull(strstr(err.message, bad_path));
	ck_assert_ptr_nonnull(strstr(err.message, "syscalls[3].args[0].op: unknown operator \"SCMP_CMP_FOO\""));
	ck_assert_int_eq(moat_seccomp_policy_show(bad_path, stdout, &err), -1);
	ck_assert_ptr_nonnull(strstr(err.message, "syscalls[3].args[0].op"));

	/* notes go to the stream */
	char *note_path = secpol_write_tmp(dir, "note.json",
				    SYS("{\"names\": [\"read\", \"not_a_syscall\"], \"action\": \"SCMP_ACT_ALLOW\"}"));
	char *notes = NULL;
	size_t notes_len = 0;
	FILE *ns = open_memstream(&notes, &notes_len);
	ck_assert_int_eq(sc_policy_check(note_path, ns, &err), 0);
	fclose(ns);
	ck_assert_ptr_nonnull(strstr(notes, "note: syscalls[0].names[1]: \"not_a_syscall\""));
	free(notes);

	/* missing file, directory */
	char *missing = NULL;
	ck_assert_int_ge(asprintf(&missing, "%s/nope.json", dir), 0);
	ck_assert_int_eq(moat_seccomp_policy_check(missing, &err), -1);
	ck_assert_int_eq(err.sys_errno, ENOENT);
	ck_assert_int_eq(moat_seccomp_policy_check(dir, &err), -1);
	ck_assert_ptr_nonnull(strstr(err.message, "not a regular file"));

	/* valid: the embedded default and a file */
	ck_assert_int_eq(moat_seccomp_policy_check(NULL, &err), 0);
	char *out = NULL;
	size_t out_len = 0;
	FILE *os = open_memstream(&out, &out_len);
	ck_assert_int_eq(moat_seccomp_policy_show(NULL, os, &err), 0);
	fclose(os);
	cJSON *j = cJSON_Parse(out);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(cJSON_GetObjectItem(j, "defaultAction")->valuestring, "SCMP_ACT_ERRNO");
	ck_assert(cJSON_IsArray(cJSON_GetObjectItem(j, "syscalls")));
	ck_assert_ptr_nonnull(strchr(out, '\n')); /* pretty */
	cJSON_Delete(j);
	free(out);
	out = NULL;
	os = open_memstream(&out, &out_len);
	ck_assert_int_eq(moat_seccomp_policy_show(note_path, os, &err), 0);
	fclose(os);
	ck_assert_ptr_nonnull(strstr(out, "not_a_syscall"));
	free(out);

	moat_error_clear(&err);
	free(missing);
	free(note_path);
	free(bad_path);
	secpol_rm_rf(dir);
	free(dir);
}
END_TEST

Suite *seccomp_policy_suite(void)
{
	Suite *s = suite_create("seccomp_policy");
	TCase *tc = tcase_create("policy");
	tcase_add_test(tc, sha256_vectors);
	tcase_add_test(tc, parse_all_fields);
	tcase_add_test(tc, parse_default_errno_is_eperm);
	tcase_add_test(tc, unknown_names_skipped_with_notes);
	tcase_add_test(tc, includes_excludes);
	tcase_add_loop_test(tc, parse_errors_name_the_path, 0, (int)(sizeof bad / sizeof bad[0]));
	tcase_add_test(tc, masked_eq_value_two_within_mask);
	tcase_add_test(tc, compile_conflicts_are_rejected);
	tcase_add_test(tc, docker_fixture_loads_and_compiles);
	tcase_add_test(tc, default_policy_loads_and_compiles);
	tcase_add_test(tc, policy_check_and_show);
	tcase_add_test(tc, default_policy_allows_at_most_230);
	tcase_add_test(tc, default_policy_refuses_the_risky_families);
	tcase_add_test(tc, evidence_union_is_allowed_or_refused);
	tcase_add_test(tc, policy_allowed_count);
	tcase_add_test(tc, zygote_policy_allows_what_the_default_does);
	seccomp_cache_tests(tc);
	seccomp_log_policy_tests(tc);
	tcase_set_timeout(tc, 30);
	suite_add_tcase(s, tc);

	TCase *run = tcase_create("installed");
	seccomp_installed_tests(run);
	tcase_set_timeout(run, 30);
	suite_add_tcase(s, run);
	return s;
}
