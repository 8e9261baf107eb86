/* --seccomp-log: denied calls reported through seccomp user notification.
 *
 * In log mode the child installs a copy of the filter in which every
 * RET ERRNO|e is RET USER_NOTIF (kill, trap, allow and log returns are
 * unchanged), with a listener the supervisor polls. For each notification the
 * supervisor runs the ORIGINAL program on the call's seccomp_data with the
 * interpreter below, answers with the errno it gives (so the program sees
 * exactly what it would without --seccomp-log) and counts the call.
 *
 * The supervisor never reads the task's memory and never lets a call through
 * (it always answers with an errno, never SECCOMP_USER_NOTIF_FLAG_CONTINUE),
 * so the usual TOCTOU concerns of user notification do not apply: the answer
 * depends on registers only, as the filter's does. Should the interpreter
 * ever disagree with the kernel (its verdict is not an errno), the call is
 * refused with EPERM and logged as "unexplained": a divergence can make an
 * answer less exact, never let a refused call run. */
#include <errno.h>
#include <poll.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "core/core.h"
#include "seccomp/internal.h"

#ifndef SECCOMP_RET_USER_NOTIF
#define SECCOMP_RET_USER_NOTIF 0x7fc00000U
#endif

#define SC_MAX_ERRNO 4095 /* the kernel caps RET ERRNO data at MAX_ERRNO */
#define SC_LOG_MAX_ENTRIES 1024u
#define SC_BPF_MEMWORDS 16
#define SC_DATA_LEN ((uint32_t)sizeof(struct seccomp_data))

/* ---- the rewrite ---- */

int sc_notify_rewrite(struct moat_seccomp_prog *prog, struct moat_error *err)
{
	if (!prog || !prog->insns || prog->len == 0)
		return moat_error_set(err, MOAT_ERR_CONFIG, EINVAL, "seccomp: no program");
	struct sock_filter *n = malloc(prog->len * sizeof *n);
	if (!n)
		return moat_error_oom(err);
	memcpy(n, prog->insns, prog->len * sizeof *n);
	for (size_t i = 0; i < prog->len; i++) {
		if (BPF_CLASS(n[i].code) != BPF_RET)
			continue;
		if (BPF_RVAL(n[i].code) != BPF_K) {
			free(n);
			return moat_error_set(err, MOAT_ERR_CONFIG, 0,
					      "seccomp: instruction %zu returns a computed value; "
					      "--seccomp-log cannot know which calls it refuses",
					      i);
		}
		if ((n[i].k & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_ERRNO)
			n[i].k = SECCOMP_RET_USER_NOTIF;
	}
	free(prog->notify_insns);
	prog->notify_insns = n;
	return 0;
}

/* ---- the interpreter ---- */

bool sc_bpf_opcode_known(uint16_t code)
{
	switch (code) {
	case BPF_LD | BPF_W | BPF_ABS:
	case BPF_LD | BPF_W | BPF_LEN:
	case BPF_LDX | BPF_W | BPF_LEN:
	case BPF_LD | BPF_IMM:
	case BPF_LDX | BPF_IMM:
	case BPF_LD | BPF_MEM:
	case BPF_LDX | BPF_MEM:
	case BPF_ST:
	case BPF_STX:
	case BPF_MISC | BPF_TAX:
	case BPF_MISC | BPF_TXA:
	case BPF_ALU | BPF_NEG:
	case BPF_JMP | BPF_JA:
	case BPF_RET | BPF_K:
	case BPF_RET | BPF_A:
		return true;
	}
	uint16_t src = BPF_SRC(code);
	if (BPF_CLASS(code) == BPF_ALU && (code & ~(0xf0 | 0x08 | 0x07)) == 0) {
		switch (BPF_OP(code)) {
		case BPF_ADD: case BPF_SUB: case BPF_MUL: case BPF_DIV:
		case BPF_AND: case BPF_OR: case BPF_XOR: case BPF_LSH: case BPF_RSH:
			return src == BPF_K || src == BPF_X;
		}
		return false;
	}
	if (BPF_CLASS(code) == BPF_JMP && (code & ~(0xf0 | 0x08 | 0x07)) == 0) {
		switch (BPF_OP(code)) {
		case BPF_JEQ: case BPF_JGT: case BPF_JGE: case BPF_JSET:
			return src == BPF_K || src == BPF_X;
		}
	}
	return false;
}

static int alu(uint16_t op, uint32_t *a, uint32_t v)
{
	switch (op) {
	case BPF_ADD: *a += v; return 0;
	case BPF_SUB: *a -= v; return 0;
	case BPF_MUL: *a *= v; return 0;
	case BPF_DIV:
		if (v == 0)
			return 1; /* classic BPF: the filter returns 0 */
		*a /= v;
		return 0;
	case BPF_AND: *a &= v; return 0;
	case BPF_OR: *a |= v; return 0;
	case BPF_XOR: *a ^= v; return 0;
	case BPF_LSH:
		if (v >= 32)
			return -1;
		*a <<= v;
		return 0;
	case BPF_RSH:
		if (v >= 32)
			return -1;
		*a >>= v;
		return 0;
	}
	return -1;
}

int sc_bpf_run(const struct sock_filter *insns, size_t len, const struct seccomp_data *d,
	       uint32_t *ret)
{
	size_t steps;
	return sc_bpf_run_counted(insns, len, d, ret, &steps);
}

int sc_bpf_run_counted(const struct sock_filter *insns, size_t len,
		       const struct seccomp_data *d, uint32_t *ret, size_t *steps)
{
	uint32_t a = 0, x = 0, mem[SC_BPF_MEMWORDS];
	unsigned mem_set = 0;
	const unsigned char *data = (const unsigned char *)d;
	*steps = 0;
	if (!insns || !d || len == 0 || len > SC_MAX_INSNS)
		return -1;
	/* Jumps are forward only: pc grows every step, so this ends. */
	for (size_t pc = 0; pc < len; pc++) {
		const struct sock_filter *f = &insns[pc];
		uint32_t k = f->k;
		++*steps;
		if (!sc_bpf_opcode_known(f->code))
			return -1;
		switch (BPF_CLASS(f->code)) {
		case BPF_RET:
			*ret = BPF_RVAL(f->code) == BPF_A ? a : k;
			return 0;
		case BPF_LD:
			switch (BPF_MODE(f->code)) {
			case BPF_ABS:
				if (k >= SC_DATA_LEN || k % 4 != 0)
					return -1;
				memcpy(&a, data + k, sizeof a);
				break;
			case BPF_LEN:
				a = SC_DATA_LEN;
				break;
			case BPF_IMM:
				a = k;
				break;
			case BPF_MEM:
				if (k >= SC_BPF_MEMWORDS || !(mem_set & (1u << k)))
					return -1;
				a = mem[k];
				break;
			default:
				return -1;
			}
			break;
		case BPF_LDX:
			switch (BPF_MODE(f->code)) {
			case BPF_LEN:
				x = SC_DATA_LEN;
				break;
			case BPF_IMM:
				x = k;
				break;
			case BPF_MEM:
				if (k >= SC_BPF_MEMWORDS || !(mem_set & (1u << k)))
					return -1;
				x = mem[k];
				break;
			default:
				return -1;
			}
			break;
		case BPF_ST:
		case BPF_STX:
			if (k >= SC_BPF_MEMWORDS)
				return -1;
			mem[k] = BPF_CLASS(f->code) == BPF_ST ? a : x;
			mem_set |= 1u << k;
			break;
		case BPF_MISC:
			if (BPF_MISCOP(f->code) == BPF_TAX)
				x = a;
			else
				a = x;
			break;
		case BPF_ALU: {
			if (BPF_OP(f->code) == BPF_NEG) {
				a = (uint32_t)-a;
				break;
			}
			int r = alu(BPF_OP(f->code), &a, BPF_SRC(f->code) == BPF_X ? x : k);
			if (r < 0)
				return -1;
			if (r > 0) {
				*ret = 0;
				return 0;
			}
			break;
		}
		case BPF_JMP: {
			size_t off;
			if (BPF_OP(f->code) == BPF_JA) {
				off = k;
			} else {
				uint32_t v = BPF_SRC(f->code) == BPF_X ? x : k;
				bool t;
				switch (BPF_OP(f->code)) {
				case BPF_JEQ: t = a == v; break;
				case BPF_JGT: t = a > v; break;
				case BPF_JGE: t = a >= v; break;
				default: t = (a & v) != 0; break; /* JSET */
				}
				off = t ? f->jt : f->jf;
			}
			if (off >= len - pc - 1)
				return -1; /* past the last instruction */
			pc += off;
			break;
		}
		default:
			return -1;
		}
	}
	return -1; /* fell off the end */
}

/* ---- the log ---- */

struct sc_log_entry {
	int nr;
	int err;          /* the errno answered */
	bool unknown;     /* the interpreter could not run the program: EPERM */
	bool unexplained; /* not the program's errno (struct sc_answer): EPERM */
	uint64_t count;
};

struct moat_seccomp_log {
	struct seccomp_notif *req;
	size_t req_size;
	struct seccomp_notif_resp *resp;
	size_t resp_size;
	struct sc_log_entry *e;
	size_t n, cap;
	uint64_t dropped; /* calls not recorded once SC_LOG_MAX_ENTRIES were in use */
	bool default_policy; /* the run's policy is the embedded default */
};

struct moat_seccomp_log *moat_seccomp_log_new(bool default_policy)
{
	struct moat_seccomp_log *log = calloc(1, sizeof *log);
	if (!log)
		return NULL;
	log->default_policy = default_policy;
	struct seccomp_notif_sizes sz = { 0 };
	if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sz) != 0)
		memset(&sz, 0, sizeof sz);
	log->req_size = sz.seccomp_notif > sizeof *log->req ? sz.seccomp_notif : sizeof *log->req;
	log->resp_size = sz.seccomp_notif_resp > sizeof *log->resp ? sz.seccomp_notif_resp
								   : sizeof *log->resp;
	log->req = calloc(1, log->req_size);
	log->resp = calloc(1, log->resp_size);
	if (!log->req || !log->resp) {
		moat_seccomp_log_free(log);
		return NULL;
	}
	return log;
}

void moat_seccomp_log_free(struct moat_seccomp_log *log)
{
	if (!log)
		return;
	free(log->req);
	free(log->resp);
	free(log->e);
	free(log);
}

static void log_record(struct moat_seccomp_log *log, int nr, const struct sc_answer *a)
{
	for (size_t i = 0; i < log->n; i++) {
		struct sc_log_entry *e = &log->e[i];
		if (e->nr == nr && e->err == a->err && e->unknown == a->unknown &&
		    e->unexplained == a->unexplained) {
			e->count++;
			return;
		}
	}
	if (log->n == SC_LOG_MAX_ENTRIES) {
		log->dropped++;
		return;
	}
	if (log->n == log->cap) {
		size_t cap = log->cap ? log->cap * 2 : 16;
		struct sc_log_entry *e = realloc(log->e, cap * sizeof *e);
		if (!e) {
			log->dropped++;
			return;
		}
		log->e = e;
		log->cap = cap;
	}
	log->e[log->n++] = (struct sc_log_entry){ .nr = nr, .err = a->err, .unknown = a->unknown,
						  .unexplained = a->unexplained, .count = 1 };
}

/* The answer to one notification. The rewrite turned exactly the program's
 * RET ERRNO returns into RET USER_NOTIF, so the original program, run on the
 * same seccomp_data, must give RET ERRNO with a non-zero errno: that errno is
 * the answer. Any other outcome means the interpreter and the kernel disagree
 * (an interpreter bug, a program it cannot run): the call is refused all the
 * same, with EPERM, and recorded as unexplained. The call is never let
 * through (no SECCOMP_USER_NOTIF_FLAG_CONTINUE): a divergence the program
 * could steer with its arguments would otherwise be a filter bypass. */
void sc_notify_answer(const struct moat_seccomp_prog *prog, const struct seccomp_notif *req,
		      struct seccomp_notif_resp *resp, size_t resp_size, struct sc_answer *out)
{
	uint32_t ret;
	*out = (struct sc_answer){ .err = EPERM };
	if (!prog || !prog->insns ||
	    sc_bpf_run(prog->insns, prog->len, &req->data, &ret) < 0) {
		out->unknown = true;
		out->unexplained = true;
	} else if ((ret & SECCOMP_RET_ACTION_FULL) == SECCOMP_RET_ERRNO &&
		   (ret & SECCOMP_RET_DATA) != 0) {
		uint32_t e = ret & SECCOMP_RET_DATA;
		out->err = (int)(e > SC_MAX_ERRNO ? SC_MAX_ERRNO : e);
	} else {
		/* allow or log (the kernel asked, so the interpreter is
		 * wrong), kill, trap, trace or notify (left unchanged in the
		 * installed filter), errno 0 (no policy compiles to it) */
		out->unexplained = true;
	}
	memset(resp, 0, resp_size);
	resp->id = req->id;
	resp->error = -out->err; /* flags stay 0: never CONTINUE */
}

static int handle_one(const struct moat_seccomp_prog *prog, int fd, struct moat_seccomp_log *log)
{
	memset(log->req, 0, log->req_size); /* the kernel wants it zeroed */
	if (ioctl(fd, SECCOMP_IOCTL_NOTIF_RECV, log->req) != 0) {
		/* ENOENT: the task went away (fatal signal) between poll and recv */
		if (errno == EINTR || errno == ENOENT || errno == EAGAIN)
			return 0;
		return -1;
	}
	const struct seccomp_notif *req = log->req;
	struct sc_answer a;
	sc_notify_answer(prog, req, log->resp, log->resp_size, &a);
	int rc;
	do
		rc = ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND, log->resp);
	while (rc != 0 && errno == EINTR);
	/* ENOENT: the task died or its call was interrupted by a signal before
	 * the answer; the attempt is still worth reporting. */
	if (rc != 0 && errno != ENOENT)
		return -1;
	log_record(log, req->data.nr, &a);
	return 0;
}

int moat_seccomp_log_handle(const struct moat_seccomp_prog *prog, int listener_fd,
			    struct moat_seccomp_log *log)
{
	if (!prog || !prog->insns || !log || listener_fd < 0)
		return -1;
	/* Answer what is pending (a bounded batch), never block: recv would
	 * wait when nothing is pending. */
	for (int i = 0; i < 64; i++) {
		struct pollfd p = { .fd = listener_fd, .events = POLLIN };
		int r = poll(&p, 1, 0);
		if (r < 0)
			return errno == EINTR ? 0 : -1;
		if (r == 0)
			return 0;
		if (p.revents & POLLNVAL)
			return -1;
		if (!(p.revents & POLLIN))
			/* POLLHUP: every task using the filter has exited */
			return (p.revents & (POLLHUP | POLLERR)) ? -1 : 0;
		if (handle_one(prog, listener_fd, log) < 0)
			return -1;
	}
	return 0;
}

char *moat_seccomp_log_json(const struct moat_seccomp_log *log)
{
	struct moat_buf b = { 0 };
	moat_buf_appendf(&b, "{\"denied\":[");
	for (size_t i = 0; log && i < log->n; i++) {
		const struct sc_log_entry *e = &log->e[i];
		char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, e->nr);
		moat_buf_appendf(&b, "%s{\"syscall\":", i ? "," : "");
		if (name)
			moat_buf_append_json_string(&b, name, strlen(name));
		else
			moat_buf_appendf(&b, "null");
		free(name);
		moat_buf_appendf(&b, ",\"nr\":%d,\"errno\":", e->nr);
		const char *en = e->err ? strerrorname_np(e->err) : NULL;
		if (en)
			moat_buf_append_json_string(&b, en, strlen(en));
		else
			moat_buf_appendf(&b, "\"%d\"", e->err);
		if (e->unknown)
			moat_buf_appendf(&b, ",\"unknown\":true");
		if (e->unexplained)
			moat_buf_appendf(&b, ",\"unexplained\":true");
		moat_buf_appendf(&b, ",\"count\":%llu}", (unsigned long long)e->count);
	}
	moat_buf_appendf(&b, "]");
	if (log && log->dropped)
		moat_buf_appendf(&b, ",\"dropped\":%llu", (unsigned long long)log->dropped);
	if (log)
		moat_buf_appendf(&b, ",\"policy\":\"%s\"", log->default_policy ? "default" : "file");
	if (log && log->default_policy && (log->n || log->dropped))
		moat_buf_appendf(&b, ",\"hint\":\"%s\"", SC_LOG_DEFAULT_HINT);
	moat_buf_appendf(&b, "}");
	return moat_buf_take(&b);
}
