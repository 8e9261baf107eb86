/* The operator's view of the store: moat kv list|get|export|clear, and the
 * quota option (moat_admin.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kv/internal.h"
#include "moat_admin.h"

int moat_kv_quota_options(const char *text, struct moat_run_options *opts,
			  struct moat_error *err)
{
	struct moat_kv_quota q;
	moat_kv_quota_default(&q);
	if (moat_kv_quota_parse(text, &q, err) < 0)
		return -1;
	opts->kv_max_keys = q.max_keys;
	opts->kv_max_bytes = q.max_bytes;
	opts->kv_max_value = q.max_value;
	opts->kv_min_free = q.min_free ? q.min_free : MOAT_KV_FREE_OFF;
	return 0;
}

int moat_kv_probe(const char *spec, char **desc, struct moat_error *err)
{
	struct moat_kv_store *st;
	if (moat_kv_open(spec, &st, err) < 0)
		return -1;
	*desc = strdup(moat_kv_backend_name(st));
	moat_kv_close(st);
	return *desc ? 0 : moat_error_oom(err);
}

/* "export": every key with its value, text as "value", other bytes as
 * "valueBase64". */
static int export_items(struct moat_kv_store *st, const char *id, size_t idlen,
			const struct moat_buf *keys, struct moat_buf *b, struct moat_kv_answer *a)
{
	moat_buf_append(b, ",\"items\":[", 10);
	for (size_t off = 0, n = 0; off + 4 <= keys->len; n++) {
		uint32_t kl = kv_le32(keys->data + off);
		const char *k = keys->data + off + 4;
		off += 4 + kl;
		if (moat_kv_get(st, id, idlen, k, kl, a) < 0)
			return -1;
		if (a->status != MOAT_KV_OK)
			continue; /* deleted meanwhile */
		moat_buf_append(b, n ? ",{\"key\":" : "{\"key\":", n ? 8 : 7);
		moat_buf_append_json_string(b, k, kl);
		if (moat_utf8_text(a->data.data ? a->data.data : "", a->data.len)) {
			moat_buf_append(b, ",\"value\":", 9);
			moat_buf_append_json_string(b, a->data.data ? a->data.data : "", a->data.len);
		} else {
			moat_buf_append(b, ",\"valueBase64\":", 15);
			moat_buf_append_base64(b, (const unsigned char *)a->data.data, a->data.len);
		}
		moat_buf_append(b, "}", 1);
	}
	moat_buf_append(b, "]", 1);
	return 0;
}

int moat_kv_admin(const char *spec, const char *op, const char *id, size_t id_len,
		  const char *key, char **out, size_t *out_len, char **detail,
		  struct moat_error *err)
{
	if (detail)
		*detail = NULL;
	bool get = !strcmp(op, "get"), list = !strcmp(op, "list"), exp = !strcmp(op, "export"),
	     clear = !strcmp(op, "clear");
	if (!get && !list && !exp && !clear)
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "unknown kv operation \"%s\" (list, get, export, clear)", op);
	if (!moat_kv_id_valid(id, id_len))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "a sandboxId is 1 to %u bytes of UTF-8 without NUL",
				      MOAT_KV_MAX_ID);
	if (get && (!key || !moat_kv_key_valid(key, strlen(key))))
		return moat_error_set(err, MOAT_ERR_CONFIG, 0,
				      "moat kv get needs a key: 1 to %u bytes of UTF-8",
				      MOAT_KV_MAX_KEY);
	struct moat_kv_store *st;
	if (moat_kv_open(spec, &st, err) < 0) {
		/* the error names the file or the server: the operator's */
		if (detail)
			*detail = err->message ? strdup(err->message) : NULL;
		return moat_error_set(err, err->type, err->sys_errno,
				      "the key-value store cannot be opened");
	}
	struct moat_kv_answer a = { 0 };
	struct moat_buf b = { 0 };
	int rc = 0;
	if (get) {
		if (moat_kv_get(st, id, id_len, key, strlen(key), &a) < 0)
			goto failed;
		rc = a.status == MOAT_KV_NOT_FOUND;
		moat_buf_append(&b, a.data.data ? a.data.data : "", a.data.len);
	} else if (clear) {
		uint64_t removed;
		if (moat_kv_clear(st, id, id_len, &removed, &a) < 0)
			goto failed;
		moat_buf_append(&b, "{\"sandboxId\":", 13);
		moat_buf_append_json_string(&b, id, id_len);
		moat_buf_appendf(&b, ",\"removed\":%llu}", (unsigned long long)removed);
	} else {
		if (moat_kv_keys(st, id, id_len, &a) < 0)
			goto failed;
		struct moat_buf keys = a.data;
		a.data = (struct moat_buf){ 0 };
		moat_buf_append(&b, "{\"sandboxId\":", 13);
		moat_buf_append_json_string(&b, id, id_len);
		if (list) {
			moat_buf_append(&b, ",\"keys\":[", 9);
			for (size_t off = 0; off + 4 <= keys.len;) {
				uint32_t kl = kv_le32(keys.data + off);
				if (off)
					moat_buf_append(&b, ",", 1);
				moat_buf_append_json_string(&b, keys.data + off + 4, kl);
				off += 4 + kl;
			}
			moat_buf_append(&b, "]", 1);
		} else if (export_items(st, id, id_len, &keys, &b, &a) < 0) {
			moat_buf_free(&keys);
			goto failed;
		}
		moat_buf_free(&keys);
		moat_buf_append(&b, "}", 1);
	}
	moat_kv_answer_reset(&a);
	moat_kv_close(st);
	if (b.oom) {
		moat_buf_free(&b);
		return moat_error_oom(err);
	}
	*out_len = b.len;
	*out = moat_buf_take(&b);
	if (!*out)
		*out = strdup("");
	return rc;
failed:
	moat_error_set(err, MOAT_ERR_UNAVAILABLE, 0, "%s",
		       a.msg.data ? a.msg.data : "the key-value store failed");
	if (detail && a.detail.len && !a.detail.oom)
		*detail = strdup(a.detail.data);
	moat_kv_answer_reset(&a);
	moat_buf_free(&b);
	moat_kv_close(st);
	return -1;
}
