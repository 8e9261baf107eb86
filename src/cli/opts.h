/* The option tables of the commands: one row per flag (its long and short
 * name, its argument, its help, what it sets, how its argument completes)
 * drives the parser, --help, `moat __options CMD` (the man page's check)
 * and the bash completion (`moat __options bash`). A flag is added in one
 * place: its row. */
#ifndef MOAT_CLI_OPTS_H
#define MOAT_CLI_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum cli_opt_kind {
	CLI_OPT_FLAG, /* no argument: the bool at off becomes true */
	CLI_OPT_STR,  /* the const char * at off becomes the argument (the last given wins) */
	CLI_OPT_UINT, /* the unsigned at off: a decimal from lo to hi, else
		       * "<prefix>--NAME wants <unit> from LO to HI, not ARG", status 2 */
	CLI_OPT_CALL, /* the command's set() takes it */
	CLI_OPT_HELP, /* the help on stdout, status 0 */
	CLI_OPT_DOC,  /* not an option: a row of the help only, arg its left column */
};

/* How the shell completes the option's argument. */
enum cli_opt_complete {
	CLI_COMP_NONE,  /* nothing to offer (a number, a duration, an address) */
	CLI_COMP_FILE,
	CLI_COMP_DIR,
	CLI_COMP_GROUP,
	CLI_COMP_WORDS, /* one of words */
	CLI_COMP_ASSIGN_FILE, /* NAME=FILE: a file after the '=' */
};

struct cli_opt {
	const char *name;    /* the long name, without "--" */
	char short_name;     /* 0: none */
	const char *arg;     /* the argument's name in the help; NULL: takes none */
	enum cli_opt_kind kind;
	size_t off;          /* FLAG, STR, UINT: the field in the command's context */
	unsigned lo, hi;     /* UINT: the bounds */
	const char *unit;    /* UINT: "a number", "seconds" */
	int id;              /* CALL: what set() is told */
	const char *help;    /* NULL: not listed in --help */
	enum cli_opt_complete complete;
	const char *words;   /* CLI_COMP_WORDS: the candidates, space-separated */
};

struct cli_cmd {
	const char *name;     /* "run" */
	const char *prefix;   /* before a bad UINT's message: "moat serve: " */
	const char *usage;    /* the help's lines before the options */
	const char *epilogue; /* and after them */
	int help_col;         /* where the options' help starts */
	const struct cli_opt *opts;
	size_t count;         /* at most 64 */
	/* CALL: 0; the exit status to stop with (after saying why); or -1, an
	 * error the command keeps in ctx and reports itself (run, exec) */
	int (*set)(void *ctx, const struct cli_opt *o, const char *arg);
	bool usage_on_error;  /* an unknown option or a missing argument: the help on stderr */
	bool dashdash_command; /* "--" is followed by a command line (completion offers it) */
};

struct cli_parsed {
	int next;      /* argv's first operand */
	bool dashdash; /* "--" ended the options (not an option's argument "--") */
	uint64_t seen; /* bit i: opts[i] was given */
	int status;    /* cli_opts_parse returned 1: exit with this */
};

/* Parses argv[1..] (argv[0] is the command's name, getopt's prefix in its
 * messages) into ctx with cmd's table: --name VALUE, --name=VALUE, a
 * unique prefix of a long name, -x VALUE, -xVALUE; options end at the
 * first operand or at "--"; a repeated option is set again. 0: the options
 * are done (p->next, p->dashdash, p->seen); 1: stop with p->status (--help:
 * 0; an unknown option, a missing argument, a bad value: 2, or what set()
 * returned, -1 among it). */
int cli_opts_parse(const struct cli_cmd *cmd, int argc, char **argv, void *ctx,
		   struct cli_parsed *p);
/* A decimal from lo to hi (no sign, nothing after it) into *out: 0, or -1. */
int cli_opts_uint(const char *s, unsigned lo, unsigned hi, unsigned *out);
/* Whether the option of this long name was given. */
bool cli_opts_given(const struct cli_cmd *cmd, const struct cli_parsed *p, const char *name);
/* The help: usage, the options with their help, the epilogue. */
void cli_opts_help(const struct cli_cmd *cmd, FILE *f);
/* Every option, one a line: -x, then --name. */
void cli_opts_list(const struct cli_cmd *cmd, FILE *f);
/* The bash functions _moat_flags CMD and _moat_arg PREV of the tables, for
 * completions/moat.bash.in. */
void cli_opts_bash(const struct cli_cmd *const *cmds, size_t n, FILE *f);

#endif
