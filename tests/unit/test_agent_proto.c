/* Unit tests: the live sandbox agent's request parser (src/agent/proto.c):
 * every bound, every malformed request refused. */
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "suites.h"
#include "agent/proto.h"

static struct agent_msg m;

static int parse(const char *buf, size_t len)
{
	return agent_parse(buf, len, &m);
}

#define P(lit) parse(lit, sizeof(lit) - 1)

START_TEST(agent_well_formed)
{
	ck_assert_int_eq(P("p"), 0);
	ck_assert_int_eq(m.op, 'p');
	ck_assert_int_eq(m.nfields, 0);
	ck_assert_int_eq(P("f"), 0); /* the disk use of /sandbox and /tmp */
	ck_assert_int_eq(m.op, 'f');
	ck_assert_int_eq(m.nfields, 0);
	ck_assert_int_eq(P("r/sandbox/a\0"), 0);
	ck_assert_str_eq(m.field[0], "/sandbox/a");
	ck_assert_int_eq(P("w/tmp/x/y\0" "1\0" "0\0"), 0);
	ck_assert_int_eq(P("l/sandbox\0" "32\0" "100000\0"), 0);
	ck_assert_int_eq(P("n/sandbox/a\0/tmp/b\0"), 0);
	ck_assert_int_eq(P("k12\0" "15\0"), 0);
	ck_assert_int_eq(P("x/sandbox\0" "0\0" "2\0sh\0-c\0A=1\0B=\0"), 0);
	ck_assert_int_eq(m.argc, 2);
	ck_assert_int_eq(m.envc, 2);
	ck_assert_str_eq(m.field[5], "A=1");
	/* stdin field 2: a code context's driver, fd 3 a socket (docs/CONTEXTS.md) */
	ck_assert_int_eq(P("x/sandbox\0" "2\0" "1\0python3\0"), 0);
	ck_assert_int_eq(m.argc, 1);
	ck_assert_int_eq(P("t/sandbox\0" "24\0" "80\0" "2\0sh\0-i\0A=1\0"), 0);
	ck_assert_int_eq(m.op, AGENT_EXEC_PTY);
	ck_assert_int_eq(m.argv0, 4);
	ck_assert_int_eq(m.argc, 2);
	ck_assert_int_eq(m.envc, 1);
	ck_assert_str_eq(m.field[m.argv0], "sh");
	ck_assert_int_eq(P("t/tmp\0" "1000\0" "1\0" "1\0sh\0"), 0);
	ck_assert_int_eq(P("i/sandbox/w\0" "1\0"), 0);
	ck_assert_int_eq(P("c8000\0"), 0); /* a connection to the sandbox's own port */
	ck_assert_str_eq(m.field[0], "8000");
	ck_assert_int_eq(P("c1\0"), 0);
	ck_assert_int_eq(P("c65535\0"), 0);
}
END_TEST

START_TEST(agent_malformed)
{
	ck_assert_int_eq(parse("", 0), -1);            /* empty */
	ck_assert_int_eq(P("z"), -1);                  /* unknown op */
	ck_assert_int_eq(P("p\0"), -1);                /* ping takes nothing */
	ck_assert_int_eq(P("f\0"), -1);                /* nor the disk's */
	ck_assert_int_eq(P("f/sandbox\0"), -1);
	ck_assert_int_eq(P("r/sandbox/a"), -1);        /* not NUL-ended */
	ck_assert_int_eq(P("r/sandbox/a\0/x\0"), -1);  /* a field too many */
	ck_assert_int_eq(P("w/sandbox/a\0"), -1);      /* one too few */
	ck_assert_int_eq(P("w/sandbox/a\0" "2\0" "0\0"), -1);  /* a flag not 0|1 */
	ck_assert_int_eq(P("w/sandbox/a\0" "10\0" "0\0"), -1);
	ck_assert_int_eq(P("w/sandbox/a\0" "0\0"), -1); /* the metadata flag missing */
	ck_assert_int_eq(P("l/sandbox\0" "0\0" "1\0"), -1);   /* depth 0 */
	ck_assert_int_eq(P("l/sandbox\0" "33\0" "1\0"), -1);  /* depth past the bound */
	ck_assert_int_eq(P("l/sandbox\0" "1\0" "100001\0"), -1);
	ck_assert_int_eq(P("l/sandbox\0" "01\0" "1\0"), -1);  /* a leading zero */
	ck_assert_int_eq(P("l/sandbox\0" "-1\0" "1\0"), -1);
	ck_assert_int_eq(P("k0\0" "9\0"), -1);         /* pid 0 */
	ck_assert_int_eq(P("k5\0" "65\0"), -1);        /* no such signal */
	ck_assert_int_eq(P("k99999999999\0" "9\0"), -1); /* 11 digits */
	ck_assert_int_eq(P("x/sandbox\0" "0\0" "0\0"), -1);          /* argc 0 */
	ck_assert_int_eq(P("x/sandbox\0" "0\0" "3\0sh\0-c\0"), -1);  /* argc past the fields */
	ck_assert_int_eq(P("x/sandbox\0" "0\0" "1\0\0"), -1);        /* argv[0] empty */
	ck_assert_int_eq(P("x/sandbox\0" "0\0" "1\0sh\0NOEQ\0"), -1); /* env without = */
	ck_assert_int_eq(P("x/sandbox\0" "0\0" "1\0sh\0=v\0"), -1);   /* env without a name */
	ck_assert_int_eq(P("x/etc\0" "0\0" "1\0sh\0"), -1);           /* cwd outside */
	ck_assert_int_eq(P("x/sandbox\0" "3\0" "1\0sh\0"), -1);       /* stdin 3 */
	ck_assert_int_eq(P("x/sandbox\0" "22\0" "1\0sh\0"), -1);      /* stdin 22 */
	ck_assert_int_eq(P("i/etc\0" "0\0"), -1);        /* a watch outside */
	ck_assert_int_eq(P("i/sandbox/..\0" "0\0"), -1);
	ck_assert_int_eq(P("i/sandbox\0" "2\0"), -1);    /* recursive not 0|1 */
	ck_assert_int_eq(P("i/sandbox\0"), -1);
	/* a pty: rows, cols 1..AGENT_MAX_WINSIZE */
	ck_assert_int_eq(P("t/sandbox\0" "0\0" "80\0" "1\0sh\0"), -1);    /* rows 0 */
	ck_assert_int_eq(P("t/sandbox\0" "24\0" "1001\0" "1\0sh\0"), -1); /* cols past */
	ck_assert_int_eq(P("t/sandbox\0" "24\0" "x\0" "1\0sh\0"), -1);
	ck_assert_int_eq(P("t/sandbox\0" "24\0" "80\0" "0\0"), -1);        /* argc 0 */
	ck_assert_int_eq(P("t/sandbox\0" "24\0" "80\0" "2\0sh\0"), -1);   /* argc past */
	ck_assert_int_eq(P("t/sandbox\0" "24\0" "80\0" "1\0\0"), -1);      /* argv[0] empty */
	ck_assert_int_eq(P("t/sandbox\0" "24\0" "1\0sh\0"), -1);           /* no cols */
	ck_assert_int_eq(P("t/etc\0" "24\0" "80\0" "1\0sh\0"), -1);       /* cwd outside */
	/* a connect: one port, 1..65535 */
	ck_assert_int_eq(P("c"), -1);
	ck_assert_int_eq(P("c0\0"), -1);
	ck_assert_int_eq(P("c65536\0"), -1);
	ck_assert_int_eq(P("c080\0"), -1);
	ck_assert_int_eq(P("c-1\0"), -1);
	ck_assert_int_eq(P("c80x\0"), -1);
	ck_assert_int_eq(P("c\0"), -1);
	ck_assert_int_eq(P("c80\0" "81\0"), -1);
}
END_TEST

static struct agent_event ev;
#define E(lit, root) agent_event_parse(lit, sizeof(lit) - 1, root, &ev)

/* A watch's events from the agent (untrusted): only the kinds known, each
 * with its number of paths, every path under the directory watched. */
START_TEST(agent_events)
{
	ck_assert_int_eq(E("c/sandbox/w/a\0", "/sandbox/w"), 0);
	ck_assert_int_eq(ev.kind, AGENT_EV_CREATE);
	ck_assert_str_eq(ev.path, "/sandbox/w/a");
	ck_assert_int_eq(E("w/sandbox/w\0", "/sandbox/w"), 0); /* the root itself */
	ck_assert_int_eq(E("r/sandbox/w/a\0/sandbox/w/d/b\0", "/sandbox/w/"), 0);
	ck_assert_str_eq(ev.to, "/sandbox/w/d/b");
	ck_assert_int_eq(E("o", "/sandbox/w"), 0);
	ck_assert_int_eq(E("g", "/tmp"), 0);
	ck_assert_int_eq(E("d/tmp/x\0", "/tmp"), 0);

	ck_assert_int_eq(E("c/sandbox/wx\0", "/sandbox/w"), -1);   /* a sibling, not under */
	ck_assert_int_eq(E("c/sandbox/a\0", "/sandbox/w"), -1);
	ck_assert_int_eq(E("c/etc/passwd\0", "/sandbox"), -1);
	ck_assert_int_eq(E("c/sandbox/w/../../etc\0", "/sandbox/w"), -1);
	ck_assert_int_eq(E("c/sandbox/w/a", "/sandbox/w"), -1);    /* not NUL-ended */
	ck_assert_int_eq(E("c", "/sandbox/w"), -1);                 /* no path */
	ck_assert_int_eq(E("c/sandbox/w/a\0/sandbox/w/b\0", "/sandbox/w"), -1); /* two */
	ck_assert_int_eq(E("r/sandbox/w/a\0", "/sandbox/w"), -1);  /* a rename's one */
	ck_assert_int_eq(E("r/sandbox/w/a\0/tmp/b\0", "/sandbox/w"), -1);
	ck_assert_int_eq(E("o/sandbox/w\0", "/sandbox/w"), -1);    /* overflow takes none */
	ck_assert_int_eq(E("x/sandbox/w/a\0", "/sandbox/w"), -1);  /* an unknown kind */
	ck_assert_int_eq(agent_event_parse("", 0, "/sandbox", &ev), -1);
}
END_TEST

START_TEST(agent_paths)
{
	int root;
	const char *rel;
	ck_assert_int_eq(agent_path("/sandbox", &root, &rel), 0);
	ck_assert_int_eq(root, 0);
	ck_assert_str_eq(rel, "");
	ck_assert_int_eq(agent_path("/tmp//a/b", &root, &rel), 0);
	ck_assert_int_eq(root, 1);
	ck_assert_str_eq(rel, "a/b");
	ck_assert_int_eq(agent_path("/sandbox/a..b/.c", &root, &rel), 0);
	const char *bad[] = { "", "/", "sandbox/a", "/sandboxx", "/tmpfoo/a", "/etc/passwd",
			      "/sandbox/..", "/sandbox/../etc", "/sandbox/a/../../etc",
			      "/sandbox/.", "/sandbox/./a", "/tmp/a/.", "/proc/self/root/sandbox" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ck_assert_msg(agent_path(bad[i], &root, &rel) == -1, "%s was taken", bad[i]);
	/* the length bound */
	char *long_path = malloc(AGENT_MAX_PATH + 2);
	ck_assert_ptr_nonnull(long_path);
	strcpy(long_path, "/sandbox/");
	memset(long_path + 9, 'a', AGENT_MAX_PATH - 9);
	long_path[AGENT_MAX_PATH] = '\0';
	ck_assert_int_eq(agent_path(long_path, &root, &rel), 0);
	long_path[AGENT_MAX_PATH] = 'a';
	long_path[AGENT_MAX_PATH + 1] = '\0';
	ck_assert_int_eq(agent_path(long_path, &root, &rel), -1);
	free(long_path);
}
END_TEST

/* A write's metadata (field 2 "1", then key, value pairs) is checked in
 * full before the agent acts on it. */
START_TEST(agent_write_metadata)
{
	ck_assert_int_eq(P("w/sandbox/a\0" "0\0" "0\0"), 0); /* none touched */
	ck_assert_int_eq(P("w/sandbox/a\0" "1\0" "1\0"), 0); /* cleared */
	ck_assert_int_eq(P("w/sandbox/a\0" "0\0" "1\0owner\0Ann B\0k2\0\0"), 0);
	ck_assert_int_eq(m.nfields, 7);
	ck_assert_str_eq(m.field[4], "Ann B");
	ck_assert_int_eq(P("w/sandbox/a\0" "0\0" "0\0k\0v\0"), -1);  /* pairs with 0 */
	ck_assert_int_eq(P("w/sandbox/a\0" "0\0" "1\0k\0"), -1);     /* a key alone */
	ck_assert_int_eq(P("w/sandbox/a\0" "0\0" "2\0"), -1);        /* a flag not 0|1 */
	ck_assert_int_eq(P("w/sandbox/a\0" "0\0" "1\0\0v\0"), -1);   /* an empty key */
	ck_assert_int_eq(P("w/sandbox/a\0" "0\0" "1\0k\0v\x7f\0"), -1); /* not printable */
	ck_assert_int_eq(P("w/sandbox/a\0" "0\0" "1\0k\0caf\xc3\xa9\0"), -1);
	ck_assert_int_eq(P("w/sandbox/a\0" "0\0" "1\0k\tx\0v\0"), -1);
	ck_assert_int_eq(P("w/sandbox/a\0" "0\0" "1\0k\0a\0k\0b\0"), -1); /* a key twice */
	/* the bounds: a key of 246 bytes, 4096 bytes in all */
	char *b = malloc(8192);
	ck_assert_ptr_nonnull(b);
	static const char head[] = "w/sandbox/a\0" "0\0" "1\0";
	size_t off = sizeof head - 1;
	memcpy(b, head, off);
	memset(b + off, 'k', 246);
	off += 246;
	b[off++] = '\0';
	memset(b + off, 'v', AGENT_MAX_META - 9 - 246);
	off += AGENT_MAX_META - 9 - 246;
	b[off++] = '\0';
	ck_assert_int_eq(parse(b, off), 0);
	b[off - 1] = 'v'; /* one byte more */
	b[off++] = '\0';
	ck_assert_int_eq(parse(b, off), -1);
	off = sizeof head - 1;
	memset(b + off, 'k', 247);
	off += 247;
	b[off++] = '\0';
	b[off++] = '\0';
	ck_assert_int_eq(parse(b, off), -1);
	free(b);
}
END_TEST

static const char *kv[2 * AGENT_MAX_META_PAIRS];
static size_t npairs;
static bool inc;
#define M(lit) agent_meta_parse(lit, sizeof(lit) - 1, kv, &npairs, &inc)

/* A stat's or a listing entry's metadata block from the agent (untrusted). */
START_TEST(agent_meta_block)
{
	ck_assert_int_eq(M("0\0k\0v\0"), 0);
	ck_assert_int_eq(npairs, 1);
	ck_assert(!inc);
	ck_assert_str_eq(kv[0], "k");
	ck_assert_str_eq(kv[1], "v");
	ck_assert_int_eq(M("1\0"), 0); /* nothing that fit, but some left out */
	ck_assert_int_eq(npairs, 0);
	ck_assert(inc);
	ck_assert_int_eq(M("1\0a b\0x y z\0c\0\0"), 0);
	ck_assert_int_eq(npairs, 2);
	ck_assert_str_eq(kv[3], "");

	ck_assert_int_eq(M("0\0"), -1);          /* a block saying nothing */
	ck_assert_int_eq(M("2\0k\0v\0"), -1);    /* a flag not 0|1 */
	ck_assert_int_eq(M("0\0k\0v"), -1);      /* not NUL-ended */
	ck_assert_int_eq(M("0\0k\0"), -1);       /* a key without its value */
	ck_assert_int_eq(M("0\0\0v\0"), -1);     /* an empty key */
	ck_assert_int_eq(M("0\0k\0\x01\0"), -1); /* not printable */
	ck_assert_int_eq(M("0\0k\0a\0k\0b\0"), -1); /* a key twice */
	ck_assert_int_eq(agent_meta_parse("", 0, kv, &npairs, &inc), -1);
	/* past 4096 bytes in all: two pairs of 2100 */
	char *b = malloc(8192);
	ck_assert_ptr_nonnull(b);
	size_t off = 0;
	b[off++] = '0';
	b[off++] = '\0';
	for (int i = 0; i < 2; i++) {
		b[off++] = (char)('a' + i);
		b[off++] = '\0';
		memset(b + off, 'v', 2100);
		off += 2100;
		b[off++] = '\0';
	}
	ck_assert_int_eq(agent_meta_parse(b, off, kv, &npairs, &inc), -1);
	/* past the pairs' count: AGENT_MAX_META_PAIRS + 1 of them */
	off = 2;
	for (size_t i = 0; i <= AGENT_MAX_META_PAIRS; i++) {
		b[off++] = 'k';
		b[off++] = '\0';
		b[off++] = '\0';
	}
	ck_assert_int_eq(agent_meta_parse(b, off, kv, &npairs, &inc), -1);
	free(b);
}
END_TEST

START_TEST(agent_bounds)
{
	/* the message's size */
	size_t big = AGENT_MAX_MSG + 1;
	char *b = calloc(1, big);
	ck_assert_ptr_nonnull(b);
	b[0] = 'p';
	ck_assert_int_eq(parse(b, big), -1);
	/* the fields' count: AGENT_MAX_FIELDS + 1 empty ones */
	size_t n = 1 + 2 * (AGENT_MAX_FIELDS + 1);
	b[0] = 'x';
	for (size_t i = 1; i < n; i += 2) {
		b[i] = 'a';
		b[i + 1] = '\0';
	}
	ck_assert_int_eq(parse(b, n), -1);
	/* exactly AGENT_MAX_FIELDS: an exec of 1021 argv */
	size_t off = 0;
	b[off++] = 'x';
	const char *head[] = { "/sandbox", "0", "1021" };
	for (int i = 0; i < 3; i++) {
		memcpy(b + off, head[i], strlen(head[i]) + 1);
		off += strlen(head[i]) + 1;
	}
	for (int i = 0; i < 1021; i++) {
		b[off++] = 'a';
		b[off++] = '\0';
	}
	ck_assert_int_eq(parse(b, off), 0);
	ck_assert_int_eq(m.argc, 1021);
	free(b);
	uint64_t v;
	ck_assert_int_eq(agent_num("4294967295", UINT64_MAX, &v), 0);
	ck_assert_int_eq(agent_num("", 10, &v), -1);
	ck_assert_int_eq(agent_num("1a", 10, &v), -1);
	ck_assert_int_eq(agent_num("11", 10, &v), -1);
}
END_TEST

Suite *agent_proto_suite(void)
{
	Suite *s = suite_create("agent_proto");
	TCase *tc = tcase_create("parser");
	tcase_add_test(tc, agent_well_formed);
	tcase_add_test(tc, agent_malformed);
	tcase_add_test(tc, agent_events);
	tcase_add_test(tc, agent_paths);
	tcase_add_test(tc, agent_bounds);
	tcase_add_test(tc, agent_write_metadata);
	tcase_add_test(tc, agent_meta_block);
	suite_add_tcase(s, tc);
	return s;
}
