/* Unit tests: the option tables' parser, help, list and bash functions
 * (src/cli/opts.c), on a table of every kind of row. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "suites.h"
#include "cli/opts.h"

struct t_args {
	const char *str, *code;
	bool flag;
	unsigned num;
	int calls;
	char last_call[32];
};

static int t_set(void *ctx, const struct cli_opt *o, const char *arg)
{
	struct t_args *a = ctx;
	a->calls++;
	snprintf(a->last_call, sizeof a->last_call, "%d:%s", o->id, arg ? arg : "");
	return arg && !strcmp(arg, "stop") ? 7 : 0;
}

static const struct cli_opt t_opts[] = {
	{ .name = "str", .arg = "S", .kind = CLI_OPT_STR, .off = offsetof(struct t_args, str),
	  .complete = CLI_COMP_FILE, .help = "a string" },
	{ .name = "code", .short_name = 'c', .arg = "CODE", .kind = CLI_OPT_STR,
	  .off = offsetof(struct t_args, code), .help = "the program text" },
	{ .name = "flag", .kind = CLI_OPT_FLAG, .off = offsetof(struct t_args, flag),
	  .help = "a flag whose help is long enough to be wrapped onto a second line of the "
		  "help, indented to the column" },
	{ .kind = CLI_OPT_DOC, .arg = "FILE | -", .help = "a row of the help only" },
	{ .name = "num", .arg = "N", .kind = CLI_OPT_UINT, .off = offsetof(struct t_args, num),
	  .lo = 1, .hi = 10, .unit = "a number", .help = "a number" },
	{ .name = "call", .short_name = 'k', .arg = "X", .kind = CLI_OPT_CALL, .id = 5,
	  .complete = CLI_COMP_WORDS, .words = "one two" },
	{ .name = "a-rather-long-option-name", .arg = "VALUE", .kind = CLI_OPT_CALL, .id = 6,
	  .complete = CLI_COMP_ASSIGN_FILE, .help = "below its name" },
	{ .name = "help", .short_name = 'h', .kind = CLI_OPT_HELP },
};

static const struct cli_cmd t_cmd = {
	.name = "t", .prefix = "moat t: ", .usage = "usage: moat t [options]\n",
	.epilogue = "the end\n", .help_col = 16, .opts = t_opts,
	.count = sizeof t_opts / sizeof t_opts[0], .set = t_set, .usage_on_error = true,
	.dashdash_command = true,
};

/* What the parse printed on stdout and stderr. */
struct t_out {
	int rc;
	struct cli_parsed p;
	char out[4096], err[4096];
};

static void slurp(FILE *f, char *buf, size_t cap)
{
	rewind(f);
	size_t n = fread(buf, 1, cap - 1, f);
	buf[n] = '\0';
	fclose(f);
}

/* Parses argv (NULL-ended; argv[0] the command's name) into a. */
static void parse(struct t_args *a, char **argv, struct t_out *o)
{
	int argc = 0;
	while (argv[argc])
		argc++;
	memset(a, 0, sizeof *a);
	memset(o, 0, sizeof *o);
	FILE *fo = tmpfile(), *fe = tmpfile();
	ck_assert_ptr_nonnull(fo);
	ck_assert_ptr_nonnull(fe);
	fflush(stdout);
	fflush(stderr);
	int so = dup(1), se = dup(2);
	dup2(fileno(fo), 1);
	dup2(fileno(fe), 2);
	o->rc = cli_opts_parse(&t_cmd, argc, argv, a, &o->p);
	fflush(stdout);
	fflush(stderr);
	dup2(so, 1);
	dup2(se, 2);
	close(so);
	close(se);
	slurp(fo, o->out, sizeof o->out);
	slurp(fe, o->err, sizeof o->err);
}

#define ARGV(...) ((char *[]){ "t", __VA_ARGS__, NULL })

START_TEST(forms_of_a_value)
{
	struct t_args a;
	struct t_out o;
	parse(&a, ARGV("--str", "v1", "--code=x=y", "--num", "3", "op"), &o);
	ck_assert_int_eq(o.rc, 0);
	ck_assert_str_eq(a.str, "v1");
	ck_assert_str_eq(a.code, "x=y"); /* "=" form: the rest after the first '=' */
	ck_assert_uint_eq(a.num, 3);
	ck_assert_int_eq(o.p.next, 6);
	ck_assert(!o.p.dashdash);
	ck_assert(cli_opts_given(&t_cmd, &o.p, "num"));
	ck_assert(!cli_opts_given(&t_cmd, &o.p, "flag"));
	ck_assert_str_eq(o.err, "");

	parse(&a, ARGV("-cprint(1)", "-k", "w", "--fl", "--num=10"), &o); /* short forms, a prefix */
	ck_assert_int_eq(o.rc, 0);
	ck_assert_str_eq(a.code, "print(1)");
	ck_assert_str_eq(a.last_call, "5:w");
	ck_assert(a.flag);
	ck_assert_uint_eq(a.num, 10);
	ck_assert_int_eq(o.p.next, 6);

	/* repeated: set again, the last wins; a CALL row is called each time */
	parse(&a, ARGV("--str", "a", "--call", "1", "--str", "b", "-k", "2"), &o);
	ck_assert_int_eq(o.rc, 0);
	ck_assert_str_eq(a.str, "b");
	ck_assert_int_eq(a.calls, 2);
	ck_assert_str_eq(a.last_call, "5:2");
}
END_TEST

START_TEST(a_value_that_looks_like_a_flag)
{
	struct t_args a;
	struct t_out o;
	parse(&a, ARGV("--str", "--flag", "-c", "-h"), &o);
	ck_assert_int_eq(o.rc, 0);
	ck_assert_str_eq(a.str, "--flag");
	ck_assert_str_eq(a.code, "-h");
	ck_assert(!a.flag);
	ck_assert_str_eq(o.out, ""); /* -h was -c's value, not the help */

	/* an option's value "--" does not end the options */
	parse(&a, ARGV("-c", "--", "--flag", "x"), &o);
	ck_assert_int_eq(o.rc, 0);
	ck_assert_str_eq(a.code, "--");
	ck_assert(a.flag);
	ck_assert(!o.p.dashdash);
	ck_assert_int_eq(o.p.next, 4);
	/* the last option's value "--", an operand after it */
	parse(&a, ARGV("--flag", "-c", "--", "x"), &o);
	ck_assert_int_eq(o.rc, 0);
	ck_assert_str_eq(a.code, "--");
	ck_assert_msg(!o.p.dashdash, "-c's value \"--\" taken for the end of the options");
	ck_assert_int_eq(o.p.next, 4);
}
END_TEST

START_TEST(dashdash_ends_the_options)
{
	struct t_args a;
	struct t_out o;
	parse(&a, ARGV("--flag", "--", "--str", "x"), &o);
	ck_assert_int_eq(o.rc, 0);
	ck_assert(a.flag);
	ck_assert_ptr_null(a.str);
	ck_assert(o.p.dashdash);
	ck_assert_int_eq(o.p.next, 3); /* argv[3] is "--str": an operand now */

	parse(&a, ARGV("--"), &o);
	ck_assert_int_eq(o.rc, 0);
	ck_assert(o.p.dashdash);
	ck_assert_int_eq(o.p.next, 2);

	/* the first operand ends them too: what follows is not parsed */
	parse(&a, ARGV("file.py", "--flag"), &o);
	ck_assert_int_eq(o.rc, 0);
	ck_assert(!a.flag);
	ck_assert(!o.p.dashdash);
	ck_assert_int_eq(o.p.next, 1);
}
END_TEST

START_TEST(unknown_and_missing)
{
	struct t_args a;
	struct t_out o;
	parse(&a, ARGV("--flag", "--bogus", "--str", "x"), &o);
	ck_assert_int_eq(o.rc, 1);
	ck_assert_int_eq(o.p.status, 2);
	ck_assert_ptr_null(a.str); /* stopped there */
	ck_assert_msg(strstr(o.err, "t: unrecognized option '--bogus'\n") == o.err, "%s", o.err);
	ck_assert_msg(strstr(o.err, "usage: moat t [options]\n"), "no help: %s", o.err);
	ck_assert_str_eq(o.out, "");

	parse(&a, ARGV("-x"), &o);
	ck_assert_int_eq(o.rc, 1);
	ck_assert_int_eq(o.p.status, 2);
	ck_assert_msg(strstr(o.err, "t: invalid option -- 'x'\n") == o.err, "%s", o.err);

	parse(&a, ARGV("--str"), &o);
	ck_assert_int_eq(o.rc, 1);
	ck_assert_int_eq(o.p.status, 2);
	ck_assert_msg(strstr(o.err, "t: option '--str' requires an argument\n") == o.err, "%s",
		      o.err);
	parse(&a, ARGV("-c"), &o);
	ck_assert_int_eq(o.rc, 1);
	ck_assert_int_eq(o.p.status, 2);
	ck_assert_msg(strstr(o.err, "t: option requires an argument -- 'c'\n") == o.err, "%s",
		      o.err);

	/* a flag given a value */
	parse(&a, ARGV("--flag=1"), &o);
	ck_assert_int_eq(o.rc, 1);
	ck_assert_int_eq(o.p.status, 2);
	ck_assert(!a.flag);
	ck_assert_msg(strstr(o.err, "t: option '--flag' doesn't allow an argument\n") == o.err,
		      "%s", o.err);
}
END_TEST

START_TEST(bad_values)
{
	static const char *const bad[] = { "0", "11", "-1", "x", "", "3x", "99999999999999999999" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct t_args a;
		struct t_out o;
		parse(&a, ARGV("--num", (char *)bad[i], "--flag"), &o);
		ck_assert_int_eq(o.rc, 1);
		ck_assert_int_eq(o.p.status, 2);
		ck_assert(!a.flag);
		char want[128];
		snprintf(want, sizeof want, "moat t: --num wants a number from 1 to 10, not %s\n",
			 bad[i]);
		ck_assert_str_eq(o.err, want);
	}
	/* a CALL row's status stops the parse */
	struct t_args a;
	struct t_out o;
	parse(&a, ARGV("--call", "stop", "--flag"), &o);
	ck_assert_int_eq(o.rc, 1);
	ck_assert_int_eq(o.p.status, 7);
	ck_assert(!a.flag);
}
END_TEST

START_TEST(help_from_the_table)
{
	struct t_args a;
	struct t_out o;
	parse(&a, ARGV("--flag", "-h", "--bogus"), &o);
	ck_assert_int_eq(o.rc, 1);
	ck_assert_int_eq(o.p.status, 0);
	ck_assert_str_eq(o.err, "");
	ck_assert_str_eq(o.out,
			 "usage: moat t [options]\n"
			 "  --str S       a string\n"
			 "  -c, --code CODE\n"
			 "                the program text\n"
			 "  --flag        a flag whose help is long enough to be wrapped onto a second\n"
			 "                line of the help, indented to the column\n"
			 "  FILE | -      a row of the help only\n"
			 "  --num N       a number\n"
			 "  --a-rather-long-option-name VALUE\n"
			 "                below its name\n"
			 "the end\n");
	parse(&a, ARGV("--he"), &o); /* a prefix */
	ck_assert_int_eq(o.rc, 1);
	ck_assert_int_eq(o.p.status, 0);
	ck_assert(!strncmp(o.out, "usage: moat t", 13));
}
END_TEST

static char *print_to_string(void (*fn)(const void *, FILE *), const void *arg)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	ck_assert_ptr_nonnull(f);
	fn(arg, f);
	fclose(f);
	return buf;
}

static void list_t(const void *arg, FILE *f)
{
	cli_opts_list(arg, f);
}

static void bash_t(const void *arg, FILE *f)
{
	const struct cli_cmd *const cmds[] = { arg };
	cli_opts_bash(cmds, 1, f);
}

START_TEST(list_and_completion)
{
	char *list = print_to_string(list_t, &t_cmd);
	ck_assert_str_eq(list, "--str\n-c\n--code\n--flag\n--num\n-k\n--call\n"
			       "--a-rather-long-option-name\n-h\n--help\n");
	free(list);
	char *bash = print_to_string(bash_t, &t_cmd);
	static const char *const want[] = {
		"\tt) echo '--str -c --code --flag --num -k --call --a-rather-long-option-name -h "
		"--help --' ;;\n",
		"\t--str)\n\t\tCOMPREPLY=($(compgen -f -- \"$cur\"))",
		"\t-k|--call)\n\t\tCOMPREPLY=($(compgen -W 'one two' -- \"$cur\")) ;;\n",
		"\t--a-rather-long-option-name)\n\t\tif [[ $cur == *=* ]]",
		"\t-c|--code|--num)\n\t\t: ;;\n",
		"\t*) return 1 ;;\n",
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
		ck_assert_msg(strstr(bash, want[i]), "no %s in:\n%s", want[i], bash);
	ck_assert_msg(!strstr(bash, "--flag)") && !strstr(bash, "|--flag"),
		      "a flag without an argument completes none:\n%s", bash);
	free(bash);
}
END_TEST

Suite *cliopts_suite(void)
{
	Suite *s = suite_create("cliopts");
	TCase *tc = tcase_create("parse");
	tcase_add_test(tc, forms_of_a_value);
	tcase_add_test(tc, a_value_that_looks_like_a_flag);
	tcase_add_test(tc, dashdash_ends_the_options);
	tcase_add_test(tc, unknown_and_missing);
	tcase_add_test(tc, bad_values);
	tcase_add_test(tc, help_from_the_table);
	tcase_add_test(tc, list_and_completion);
	suite_add_tcase(s, tc);
	return s;
}
