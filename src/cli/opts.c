/* The option tables' parser, help, list and bash completion (cli/opts.h).
 * The parser is getopt_long's, fed from the table: its long options, its
 * "+" (options end at the first operand), its messages ("run: unrecognized
 * option '--x'") and its unique prefixes stay what the commands had. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli/opts.h"

#define OPTS_MAX 64 /* cli_parsed.seen's bits */
#define LONG_BASE 256 /* getopt's value of opts[i] without a short name: LONG_BASE + i */

int cli_opts_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi || s[0] == '-')
		return -1;
	*out = (unsigned)v;
	return 0;
}

static bool is_option(const struct cli_opt *o)
{
	return o->kind != CLI_OPT_DOC && o->name;
}

/* The row of getopt's value c, or NULL. */
static const struct cli_opt *row_of(const struct cli_cmd *cmd, int c, size_t *index)
{
	for (size_t i = 0; i < cmd->count; i++) {
		const struct cli_opt *o = &cmd->opts[i];
		if (!is_option(o))
			continue;
		if ((o->short_name && c == o->short_name) ||
		    (!o->short_name && c == LONG_BASE + (int)i)) {
			*index = i;
			return o;
		}
	}
	return NULL;
}

/* Stops the parse with status st. */
static int stop(struct cli_parsed *p, int st)
{
	p->status = st;
	return 1;
}

int cli_opts_parse(const struct cli_cmd *cmd, int argc, char **argv, void *ctx,
		   struct cli_parsed *p)
{
	struct option longs[OPTS_MAX + 1];
	char shorts[2 * OPTS_MAX + 2];
	size_t nl = 0, ns = 0;
	memset(p, 0, sizeof *p);
	if (cmd->count > OPTS_MAX) {
		fprintf(stderr, "moat %s: the option table is too long\n", cmd->name);
		return stop(p, 3);
	}
	shorts[ns++] = '+';
	for (size_t i = 0; i < cmd->count; i++) {
		const struct cli_opt *o = &cmd->opts[i];
		if (!is_option(o))
			continue;
		int val = o->short_name ? o->short_name : LONG_BASE + (int)i;
		longs[nl++] = (struct option){ o->name, o->arg ? required_argument : no_argument,
					       NULL, val };
		if (o->short_name) {
			shorts[ns++] = o->short_name;
			if (o->arg)
				shorts[ns++] = ':';
		}
	}
	longs[nl] = (struct option){ 0 };
	shorts[ns] = '\0';

	const char *last_optarg = NULL;
	optind = 0; /* getopt starts afresh (a previous parse may have stopped mid-word) */
	int c;
	while ((c = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
		size_t i = 0;
		const struct cli_opt *o = row_of(cmd, c, &i);
		if (!o) { /* '?': getopt said why */
			if (cmd->usage_on_error)
				cli_opts_help(cmd, stderr);
			return stop(p, 2);
		}
		last_optarg = optarg;
		p->seen |= UINT64_C(1) << i;
		char *field = (char *)ctx + o->off;
		switch (o->kind) {
		case CLI_OPT_FLAG:
			*(bool *)field = true;
			break;
		case CLI_OPT_STR:
			*(const char **)field = optarg;
			break;
		case CLI_OPT_UINT:
			if (cli_opts_uint(optarg, o->lo, o->hi, (unsigned *)field) < 0) {
				fprintf(stderr, "%s--%s wants %s from %u to %u, not %s\n",
					cmd->prefix ? cmd->prefix : "", o->name, o->unit, o->lo, o->hi,
					optarg);
				return stop(p, 2);
			}
			break;
		case CLI_OPT_CALL: {
			int st = cmd->set ? cmd->set(ctx, o, optarg) : 2;
			if (st)
				return stop(p, st);
			break;
		}
		case CLI_OPT_HELP:
			cli_opts_help(cmd, stdout);
			return stop(p, 0);
		case CLI_OPT_DOC:
			break;
		}
	}
	p->next = optind;
	/* "--" ended the options, not an option's argument "--" */
	p->dashdash = optind > 1 && !strcmp(argv[optind - 1], "--") &&
		      argv[optind - 1] != last_optarg;
	return 0;
}

bool cli_opts_given(const struct cli_cmd *cmd, const struct cli_parsed *p, const char *name)
{
	for (size_t i = 0; i < cmd->count && i < OPTS_MAX; i++)
		if (is_option(&cmd->opts[i]) && !strcmp(cmd->opts[i].name, name))
			return p->seen & (UINT64_C(1) << i);
	return false;
}

#define HELP_WIDTH 79

/* text from column col, its words wrapped to HELP_WIDTH; a '\n' in it
 * starts a line of its own; every line after the first indented to col. */
static void wrap(FILE *f, const char *text, int col)
{
	int at = col;
	bool line_start = true;
	const char *s = text;
	while (*s) {
		if (*s == '\n') {
			fprintf(f, "\n%*s", col, "");
			at = col;
			line_start = true;
			s++;
			continue;
		}
		if (*s == ' ') {
			s++;
			continue;
		}
		size_t w = strcspn(s, " \n");
		if (!line_start && at + 1 + (int)w > HELP_WIDTH) {
			fprintf(f, "\n%*s", col, "");
			at = col;
			line_start = true;
		}
		if (!line_start) {
			fputc(' ', f);
			at++;
		}
		fwrite(s, 1, w, f);
		at += (int)w;
		line_start = false;
		s += w;
	}
	fputc('\n', f);
}

void cli_opts_help(const struct cli_cmd *cmd, FILE *f)
{
	if (cmd->usage)
		fputs(cmd->usage, f);
	for (size_t i = 0; i < cmd->count; i++) {
		const struct cli_opt *o = &cmd->opts[i];
		if (!o->help)
			continue;
		int n;
		const char *sp = o->arg ? " " : "", *arg = o->arg ? o->arg : "";
		if (o->kind == CLI_OPT_DOC)
			n = fprintf(f, "  %s", arg);
		else if (o->short_name)
			n = fprintf(f, "  -%c, --%s%s%s", o->short_name, o->name, sp, arg);
		else
			n = fprintf(f, "  --%s%s%s", o->name, sp, arg);
		if (n + 2 > cmd->help_col)
			fprintf(f, "\n%*s", cmd->help_col, "");
		else
			fprintf(f, "%*s", cmd->help_col - n, "");
		wrap(f, o->help, cmd->help_col);
	}
	if (cmd->epilogue)
		fputs(cmd->epilogue, f);
}

void cli_opts_list(const struct cli_cmd *cmd, FILE *f)
{
	for (size_t i = 0; i < cmd->count; i++) {
		const struct cli_opt *o = &cmd->opts[i];
		if (!is_option(o))
			continue;
		if (o->short_name)
			fprintf(f, "-%c\n", o->short_name);
		fprintf(f, "--%s\n", o->name);
	}
}

/* Whether an option with an argument and o's name comes before o
 * (cmds[ci]->opts[oi]) in the tables: the first one's completion is the
 * name's, for every command (the completion goes by the word before the
 * cursor). */
static bool named_before(const struct cli_cmd *const *cmds, size_t ci, size_t oi,
			 const struct cli_opt *o)
{
	for (size_t c = 0; c <= ci; c++)
		for (size_t i = 0; i < (c == ci ? oi : cmds[c]->count); i++) {
			const struct cli_opt *q = &cmds[c]->opts[i];
			if (is_option(q) && q->arg && !strcmp(q->name, o->name))
				return true;
		}
	return false;
}

/* cmds[c]->opts[i] when it takes an argument completed as kind and is the
 * first of its name; else NULL. */
static const struct cli_opt *completes_as(const struct cli_cmd *const *cmds, size_t c, size_t i,
					  enum cli_opt_complete kind)
{
	const struct cli_opt *o = &cmds[c]->opts[i];
	return is_option(o) && o->arg && o->complete == kind && !named_before(cmds, c, i, o) ? o
											     : NULL;
}

/* o's names (-x, --name), each after sep but the very first (*k counts) */
static void put_names(const struct cli_opt *o, const char *sep, int *k, FILE *f)
{
	if (o->short_name)
		fprintf(f, "%s-%c", (*k)++ ? sep : "", o->short_name);
	fprintf(f, "%s--%s", (*k)++ ? sep : "", o->name);
}

/* The names (-x|--name) of the options whose argument completes as kind,
 * each once, joined by '|'; 0 when none. */
static int bash_names(const struct cli_cmd *const *cmds, size_t n, enum cli_opt_complete kind,
		      FILE *f)
{
	int k = 0;
	for (size_t c = 0; c < n; c++)
		for (size_t i = 0; i < cmds[c]->count; i++) {
			const struct cli_opt *o = completes_as(cmds, c, i, kind);
			if (o)
				put_names(o, "|", &k, f);
		}
	return k;
}

void cli_opts_bash(const struct cli_cmd *const *cmds, size_t n, FILE *f)
{
	fputs("# generated from the option tables (moat __options bash, src/cli/opts.c)\n"
	      "_moat_flags() # the options of command $1\n{\n\tcase $1 in\n", f);
	for (size_t c = 0; c < n; c++) {
		fprintf(f, "\t%s) echo '", cmds[c]->name);
		int k = 0;
		for (size_t i = 0; i < cmds[c]->count; i++)
			if (is_option(&cmds[c]->opts[i]))
				put_names(&cmds[c]->opts[i], " ", &k, f);
		fprintf(f, "%s' ;;\n", cmds[c]->dashdash_command ? " --" : "");
	}
	fputs("\tesac\n}\n"
	      "_moat_arg() # completes the argument of option $1 into COMPREPLY; 1: $1 takes none\n"
	      "{\n\tcase $1 in\n", f);
	static const struct {
		enum cli_opt_complete kind;
		const char *action;
	} acts[] = {
		{ CLI_COMP_FILE, "COMPREPLY=($(compgen -f -- \"$cur\")); compopt -o filenames "
				 "2>/dev/null" },
		{ CLI_COMP_DIR, "COMPREPLY=($(compgen -d -- \"$cur\")); compopt -o filenames "
				"2>/dev/null" },
		{ CLI_COMP_GROUP, "COMPREPLY=($(compgen -g -- \"$cur\"))" },
		{ CLI_COMP_ASSIGN_FILE, "if [[ $cur == *=* ]]; then\n"
					"\t\t\tCOMPREPLY=($(compgen -f -P \"${cur%%=*}=\" -- "
					"\"${cur#*=}\")); compopt -o filenames 2>/dev/null\n"
					"\t\tfi" },
		{ CLI_COMP_NONE, ":" },
	};
	for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++) {
		fputc('\t', f);
		if (bash_names(cmds, n, acts[a].kind, f))
			fprintf(f, ")\n\t\t%s ;;\n", acts[a].action);
		else
			fputs("__moat_none__) ;;\n", f);
	}
	for (size_t c = 0; c < n; c++)
		for (size_t i = 0; i < cmds[c]->count; i++) {
			const struct cli_opt *o = completes_as(cmds, c, i, CLI_COMP_WORDS);
			if (!o)
				continue;
			int k = 0;
			fputc('\t', f);
			put_names(o, "|", &k, f);
			fprintf(f, ")\n\t\tCOMPREPLY=($(compgen -W '%s' -- \"$cur\")) ;;\n",
				o->words ? o->words : "");
		}
	fputs("\t*) return 1 ;;\n\tesac\n\treturn 0\n}\n", f);
}
