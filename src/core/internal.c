/* SPDX-License-Identifier: MIT */
/*
 * The services every layer above calls on a writer handle (internal.h):
 * caller-sized structs, the log hook, the file's first error, refusals,
 * and the process-wide code_index blocks.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

int jitring_struct_in(void *dst, size_t dsize, const void *src, uint32_t ssize,
		      size_t v1)
{
	const unsigned char *tail = (const unsigned char *)src + dsize;

	if (ssize < v1)
		return -EINVAL;
	for (size_t i = 0; ssize > dsize && i < ssize - dsize; i++)
		if (tail[i])
			return -E2BIG;
	memset(dst, 0, dsize);
	memcpy(dst, src, ssize < dsize ? ssize : dsize);
	return 0;
}

void jitring_log(const struct jitring *jr, int level, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	if (!jr->log)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	jr->log(jr->log_arg, level, msg);
}

void jitring_set_io_error(struct jitring *jr, int err)
{
	int32_t none = 0;
	uint32_t open = JR_OPEN;

	if (atomic_compare_exchange_strong_explicit(&jr->io_error, &none, err,
						    memory_order_relaxed,
						    memory_order_relaxed))
		jitring_log(jr, JITRING_LOG_ERR, "jitdump %s failed: %s",
			    jr->file.path, strerror(-err));
	/*
	 * Writers test state only; the error value is read after they see
	 * JR_FAILED.  Pairs with the acquire load of state in
	 * jitring_refuse_state().
	 */
	atomic_compare_exchange_strong_explicit(&jr->state, &open, JR_FAILED,
						memory_order_release,
						memory_order_relaxed);
}

/* ------------------------------------------------------------------ */
/* code_index values.                                                   */

/*
 * One counter for the process: two writers, open at once or one after the
 * other on the same dump, never hand out the same index (perf names each
 * injected ELF by it).  Blocks of JR_ID_BLOCK, aligned: the rings engine
 * keeps one idmap word per block.  Relaxed: uniqueness is the RMW's, and
 * nothing else is published through the counter.
 */
static _Atomic uint64_t jr_ids = JR_ID_BLOCK;

uint64_t jitring_ids_take(void)
{
	return atomic_fetch_add_explicit(&jr_ids, JR_ID_BLOCK,
					 memory_order_relaxed);
}

uint64_t jitring_ids_peek(void)
{
	return atomic_load_explicit(&jr_ids, memory_order_relaxed);
}

/* ------------------------------------------------------------------ */
/* Refusals.                                                            */

/*
 * The answer for a call that found state != JR_OPEN.  Counts the refusal.
 * Return: -ESHUTDOWN or the file's error.
 */
int jitring_refuse_state(struct jitring *jr, uint32_t s)
{
	if (s >= JR_CLOSING) {
		jitring_count(&jr->c.refused_shutdown, 1);
		return -ESHUTDOWN;
	}
	jitring_count(&jr->c.refused_io, 1);
	/* s is JR_FAILED, whose store was a release after io_error. */
	return atomic_load_explicit(&jr->io_error, memory_order_relaxed);
}

/*
 * An argument error: but once close has started, -ESHUTDOWN wins over it
 * (every call on a closed writer gets -ESHUTDOWN).  Only this error path
 * reads the state, so valid calls pay nothing for the rule.  Relaxed: the
 * answer is one of two refusals either way, and a caller ordered after
 * the close (its own earlier call, or any synchronisation) sees CLOSING by
 * coherence and happens-before.
 */
JR_NOINLINE int jitring_refuse_args(struct jitring *jr, int err)
{
	if (atomic_load_explicit(&jr->state, memory_order_relaxed) >=
	    JR_CLOSING) {
		jitring_count(&jr->c.refused_shutdown, 1);
		return -ESHUTDOWN;
	}
	jitring_count(&jr->c.refused_invalid, 1);
	return err;
}
